/*
 * Base64 for toolhost, in C: `base64_encode` and `base64_decode`.
 *
 * Pure computation: no grants. Built by build.sh with clang for wasm32-wasi
 * and `toolhost componentize`, against the C SDK in guest-sdk/c.
 */
#include <stdio.h>
#include <string.h>

#include "toolhost.h"

static const char ALPHABET[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

#define TEXT_SCHEMA(what)                                                                  \
    "{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\",\"description\":\"" \
    what "\"}},\"required\":[\"text\"],\"additionalProperties\":false}"

static void encode(const toolhost_call *call, toolhost_result *out) {
    size_t len;
    char *text = toolhost_arg_string_n(call, "text", &len);
    if (text == NULL) {
        toolhost_error(out, "invalid_input", true, "`text` must be a string");
        return;
    }
    char *encoded = malloc((len + 2) / 3 * 4 + 1);
    if (encoded == NULL) abort();
    size_t n = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t chunk = (uint32_t)(uint8_t)text[i] << 16;
        if (i + 1 < len) chunk |= (uint32_t)(uint8_t)text[i + 1] << 8;
        if (i + 2 < len) chunk |= (uint8_t)text[i + 2];
        encoded[n++] = ALPHABET[(chunk >> 18) & 63];
        encoded[n++] = ALPHABET[(chunk >> 12) & 63];
        encoded[n++] = i + 1 < len ? ALPHABET[(chunk >> 6) & 63] : '=';
        encoded[n++] = i + 2 < len ? ALPHABET[chunk & 63] : '=';
    }
    encoded[n] = '\0';
    toolhost_text(out, "%s", encoded);
    free(encoded);
    free(text);
}

static int value_of(char c) {
    const char *at = c ? strchr(ALPHABET, c) : NULL;
    return at ? (int)(at - ALPHABET) : -1;
}

/* Whether bytes [0, len) are text: UTF-8 without NUL. */
static bool is_text(const uint8_t *s, size_t len) {
    return memchr(s, 0, len) == NULL && toolhost_utf8_valid(s, len);
}

static void decode(const toolhost_call *call, toolhost_result *out) {
    char *text = toolhost_arg_string(call, "text");
    if (text == NULL) {
        toolhost_error(out, "invalid_input", true, "`text` must be a string");
        return;
    }
    size_t len = strlen(text);
    uint8_t *bytes = malloc(len / 4 * 3 + 3);
    if (bytes == NULL) abort();
    size_t n = 0;
    uint32_t chunk = 0;
    int bits = 0;
    size_t symbols = 0, padding = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '\n' || c == '\r' || c == ' ') continue;
        /* Padding ends the data: nothing but more padding may follow. */
        if (c == '=') {
            padding++;
            continue;
        }
        int v = padding == 0 ? value_of((char)c) : -1;
        if (v < 0) {
            if (padding > 0) {
                toolhost_error(out, "invalid_input", true,
                               "`text` is not base64: data follows the padding at position %zu",
                               i);
            } else if (c < 0x80) {
                toolhost_error(out, "invalid_input", true,
                               "`text` is not base64: '%c' at position %zu is not in the alphabet "
                               "A-Z a-z 0-9 + /",
                               c, i);
            } else {
                toolhost_error(out, "invalid_input", true,
                               "`text` is not base64: byte 0x%02x at position %zu is not in the "
                               "alphabet A-Z a-z 0-9 + /",
                               c, i);
            }
            free(bytes);
            free(text);
            return;
        }
        symbols++;
        chunk = (chunk << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            bytes[n++] = (uint8_t)(chunk >> bits);
        }
    }
    /* A last group of one symbol holds no whole byte; padding, when given,
     * fills the group to four. */
    if (symbols % 4 == 1 || (padding > 0 && (symbols + padding) % 4 != 0) || padding > 2) {
        toolhost_error(out, "invalid_input", true,
                       "`text` is not base64: %zu symbols and %zu padding characters do not make "
                       "whole groups of four",
                       symbols, padding);
        free(bytes);
        free(text);
        return;
    }
    if (!is_text(bytes, n)) {
        toolhost_error(out, "invalid_input", false,
                       "the decoded %zu bytes are not text (UTF-8 without NUL), which is all "
                       "this tool returns",
                       n);
    } else {
        toolhost_text(out, "%.*s", (int)n, (const char *)bytes);
    }
    free(bytes);
    free(text);
}

TOOLHOST_TOOLS(
    {
        .name = "base64_encode",
        .description = "Encode text (as UTF-8) in base64",
        .input_schema = TEXT_SCHEMA("The text to encode."),
        .hints = TOOLHOST_READ_ONLY | TOOLHOST_IDEMPOTENT,
        .run = encode,
    },
    {
        .name = "base64_decode",
        .description = "Decode base64 into text; fails when the bytes are not UTF-8",
        .input_schema = TEXT_SCHEMA("The base64 to decode; padding and line breaks are allowed."),
        .hints = TOOLHOST_READ_ONLY | TOOLHOST_IDEMPOTENT,
        .run = decode,
    });
