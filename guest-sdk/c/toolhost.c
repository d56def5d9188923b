/*
 * The C SDK: the contract's exports over the tool table, argument reading,
 * results, and helpers for the host, HTTP and key-value stores. See
 * toolhost.h.
 */
#include "toolhost.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* Response bodies larger than this are refused: a tool's memory is limited,
 * and a runaway download should fail with a clear error, not a trap. */
#define MAX_HTTP_BODY (8u * 1024u * 1024u)

struct toolhost_call {
    const char *json;
    size_t json_len;
    const char *call_id;
    uint64_t deadline_ms;
    const char *context;
};

struct toolhost_result {
    toolhost_tool_types_content_block_t *blocks;
    size_t len;
    size_t cap;
    char *structured;
    bool failed;
    char *kind;
    char *message;
    bool retryable;
};

/* --- Memory ------------------------------------------------------------------ */

/* malloc that never returns NULL: out of memory, the tool cannot answer
 * anyway, and the host reports the trap as memory_exhausted. */
static void *xmalloc(size_t size) {
    void *p = malloc(size ? size : 1);
    if (p == NULL) {
        abort();
    }
    return p;
}

static char *xstrndup(const char *s, size_t len) {
    char *copy = xmalloc(len + 1);
    memcpy(copy, s, len);
    copy[len] = '\0';
    return copy;
}

/* printf into a new string. */
static char *vformat(const char *format, va_list args) {
    va_list again;
    va_copy(again, args);
    int len = vsnprintf(NULL, 0, format, args);
    if (len < 0) {
        va_end(again);
        return xstrndup("", 0);
    }
    char *text = xmalloc((size_t)len + 1);
    vsnprintf(text, (size_t)len + 1, format, again);
    va_end(again);
    return text;
}

static char *format(const char *format, ...) __attribute__((format(printf, 1, 2)));
static char *format(const char *format, ...) {
    va_list args;
    va_start(args, format);
    char *text = vformat(format, args);
    va_end(args);
    return text;
}

/* A contract string owning a copy of `s` (which may be NULL: empty). */
static toolbox_string_t owned(const char *s) {
    toolbox_string_t out;
    if (s == NULL) {
        s = "";
    }
    toolbox_string_dup(&out, s);
    return out;
}

/* A contract string borrowing `s` (for imports, which copy it). */
static toolbox_string_t borrowed(const char *s) {
    toolbox_string_t out = {(uint8_t *)s, strlen(s)};
    return out;
}

/* --- JSON: just enough to read the arguments object ---------------------------- */

static const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) {
        p++;
    }
    return p;
}

/* Past the string starting at p (on its opening quote), or NULL. */
static const char *skip_string(const char *p, const char *end) {
    for (p++; p < end; p++) {
        if (*p == '\\') {
            p++;
        } else if (*p == '"') {
            return p + 1;
        }
    }
    return NULL;
}

/* Past the value starting at p, or NULL when it is malformed. Nesting is
 * counted, not recursed into, so deep arguments cannot exhaust the stack. */
static const char *skip_value(const char *p, const char *end) {
    size_t depth = 0;
    do {
        p = skip_ws(p, end);
        if (p >= end) {
            return NULL;
        }
        switch (*p) {
        case '"':
            p = skip_string(p, end);
            if (p == NULL) {
                return NULL;
            }
            break;
        case '{':
        case '[':
            depth++;
            p++;
            break;
        case '}':
        case ']':
            if (depth == 0) {
                return NULL;
            }
            depth--;
            p++;
            break;
        case ',':
        case ':':
            if (depth == 0) {
                return NULL;
            }
            p++;
            break;
        default:
            /* A number, true, false or null. */
            while (p < end && *p != '\0' && strchr(" \t\r\n,:]}", *p) == NULL) {
                p++;
            }
        }
    } while (depth > 0);
    return p;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool read_hex4(const char *p, const char *end, uint32_t *out) {
    if (end - p < 4) {
        return false;
    }
    uint32_t value = 0;
    for (int i = 0; i < 4; i++) {
        int d = hex_digit(p[i]);
        if (d < 0) {
            return false;
        }
        value = value * 16 + (uint32_t)d;
    }
    *out = value;
    return true;
}

static size_t put_utf8(char *out, uint32_t c) {
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    } else if (c < 0x800) {
        out[0] = (char)(0xC0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    } else if (c < 0x10000) {
        out[0] = (char)(0xE0 | (c >> 12));
        out[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (c >> 18));
    out[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    out[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

/* The string starting at p (on its quote), unescaped, or NULL. An unpaired
 * surrogate becomes U+FFFD, as the host's own JSON parser would not have
 * let one through to begin with. */
static char *parse_string(const char *p, const char *end, size_t *len) {
    const char *close = skip_string(p, end);
    if (close == NULL) {
        return NULL;
    }
    /* Unescaped text is never longer than escaped text. */
    char *out = xmalloc((size_t)(close - p));
    size_t n = 0;
    for (p++; p < close - 1; p++) {
        if (*p != '\\') {
            out[n++] = *p;
            continue;
        }
        p++;
        switch (*p) {
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'n': out[n++] = '\n'; break;
        case 'r': out[n++] = '\r'; break;
        case 't': out[n++] = '\t'; break;
        case 'u': {
            uint32_t c;
            if (!read_hex4(p + 1, close, &c)) {
                free(out);
                return NULL;
            }
            p += 4;
            if (c >= 0xD800 && c <= 0xDBFF) {
                uint32_t low;
                if (p + 2 < close && p[1] == '\\' && p[2] == 'u' &&
                    read_hex4(p + 3, close, &low) && low >= 0xDC00 && low <= 0xDFFF) {
                    c = 0x10000 + ((c - 0xD800) << 10) + (low - 0xDC00);
                    p += 6;
                } else {
                    c = 0xFFFD;
                }
            } else if (c >= 0xDC00 && c <= 0xDFFF) {
                c = 0xFFFD;
            }
            n += put_utf8(out + n, c);
            break;
        }
        default:
            /* \" \\ \/ */
            out[n++] = *p;
        }
    }
    out[n] = '\0';
    if (len != NULL) {
        *len = n;
    }
    return out;
}

/* The value of top-level member `key` of the arguments object, or NULL. */
static const char *member(const toolhost_call *call, const char *key) {
    const char *end = call->json + call->json_len;
    const char *p = skip_ws(call->json, end);
    if (p >= end || *p != '{') {
        return NULL;
    }
    p = skip_ws(p + 1, end);
    while (p < end && *p == '"') {
        size_t name_len;
        char *name = parse_string(p, end, &name_len);
        if (name == NULL) {
            return NULL;
        }
        bool match = name_len == strlen(key) && memcmp(name, key, name_len) == 0;
        free(name);
        p = skip_ws(skip_string(p, end), end);
        if (p >= end || *p != ':') {
            return NULL;
        }
        const char *value = skip_ws(p + 1, end);
        if (match) {
            return value;
        }
        p = skip_value(value, end);
        if (p == NULL) {
            return NULL;
        }
        p = skip_ws(p, end);
        if (p < end && *p == ',') {
            p = skip_ws(p + 1, end);
        }
    }
    return NULL;
}

char *toolhost_arg_string_n(const toolhost_call *call, const char *key, size_t *len) {
    const char *value = member(call, key);
    if (value == NULL || *value != '"') {
        return NULL;
    }
    return parse_string(value, call->json + call->json_len, len);
}

char *toolhost_arg_string(const toolhost_call *call, const char *key) {
    return toolhost_arg_string_n(call, key, NULL);
}

bool toolhost_arg_number(const toolhost_call *call, const char *key, double *out) {
    const char *value = member(call, key);
    if (value == NULL || !(*value == '-' || (*value >= '0' && *value <= '9'))) {
        return false;
    }
    /* The arguments are NUL-terminated, and a number ends at a delimiter. */
    char *after;
    *out = strtod(value, &after);
    return after != value;
}

bool toolhost_arg_int(const toolhost_call *call, const char *key, int64_t *out) {
    const char *value = member(call, key);
    if (value == NULL || !(*value == '-' || (*value >= '0' && *value <= '9'))) {
        return false;
    }
    size_t len = strspn(value, "-+0123456789.eE");
    if (memchr(value, '.', len) == NULL && memchr(value, 'e', len) == NULL &&
        memchr(value, 'E', len) == NULL) {
        /* An integer literal: exactly, through the whole int64_t range. */
        char *after;
        errno = 0;
        long long integer = strtoll(value, &after, 10);
        if (after == value || errno == ERANGE) {
            return false;
        }
        *out = (int64_t)integer;
        return true;
    }
    /* 1.0 and 1e3 are whole numbers too; the range is checked before the
     * conversion, which is undefined outside it. */
    double number;
    if (!toolhost_arg_number(call, key, &number) || !(number >= -0x1p63 && number < 0x1p63) ||
        number != (double)(int64_t)number) {
        return false;
    }
    *out = (int64_t)number;
    return true;
}

bool toolhost_arg_bool(const toolhost_call *call, const char *key, bool *out) {
    const char *value = member(call, key);
    const char *end = call->json + call->json_len;
    if (value != NULL && end - value >= 4 && memcmp(value, "true", 4) == 0) {
        *out = true;
        return true;
    }
    if (value != NULL && end - value >= 5 && memcmp(value, "false", 5) == 0) {
        *out = false;
        return true;
    }
    return false;
}

bool toolhost_arg_present(const toolhost_call *call, const char *key) {
    const char *value = member(call, key);
    const char *end = call->json + call->json_len;
    return value != NULL && !(end - value >= 4 && memcmp(value, "null", 4) == 0);
}

const char *toolhost_args_json(const toolhost_call *call) { return call->json; }
const char *toolhost_call_id(const toolhost_call *call) { return call->call_id; }
uint64_t toolhost_deadline_ms(const toolhost_call *call) { return call->deadline_ms; }
const char *toolhost_context(const toolhost_call *call) { return call->context; }

/* --- Results ------------------------------------------------------------------ */

static toolhost_tool_types_content_block_t *push_block(toolhost_result *out) {
    if (out->len == out->cap) {
        out->cap = out->cap ? out->cap * 2 : 4;
        out->blocks = realloc(out->blocks, out->cap * sizeof *out->blocks);
        if (out->blocks == NULL) {
            abort();
        }
    }
    return &out->blocks[out->len++];
}

void toolhost_text(toolhost_result *out, const char *format, ...) {
    va_list args;
    va_start(args, format);
    char *text = vformat(format, args);
    va_end(args);
    toolhost_tool_types_content_block_t *block = push_block(out);
    block->tag = TOOLHOST_TOOL_TYPES_CONTENT_BLOCK_TEXT;
    block->val.text.ptr = (uint8_t *)text;
    block->val.text.len = strlen(text);
}

void toolhost_image(toolhost_result *out, const char *mime_type, const uint8_t *data, size_t len) {
    toolhost_tool_types_content_block_t *block = push_block(out);
    block->tag = TOOLHOST_TOOL_TYPES_CONTENT_BLOCK_IMAGE;
    block->val.image.mime_type = owned(mime_type);
    block->val.image.data.ptr = xmalloc(len);
    memcpy(block->val.image.data.ptr, data, len);
    block->val.image.data.len = len;
}

void toolhost_structured(toolhost_result *out, const char *json) {
    free(out->structured);
    out->structured = xstrndup(json, strlen(json));
}

static void fail(toolhost_result *out, const char *kind, bool retryable, char *message) {
    free(out->kind);
    free(out->message);
    out->failed = true;
    out->kind = xstrndup(kind, strlen(kind));
    out->message = message;
    out->retryable = retryable;
}

void toolhost_error(toolhost_result *out, const char *kind, bool retryable, const char *format,
                    ...) {
    va_list args;
    va_start(args, format);
    fail(out, kind, retryable, vformat(format, args));
    va_end(args);
}

/* Whether `path` or a directory above it can be seen: inside WASI, only
 * what the manifest grants can. `..` is resolved in the text first, as WASI
 * does, so "/data/../etc" is not inside "/data". */
static bool within_grants(const char *path) {
    /* A relative path is relative to the working directory. */
    char cwd[1024];
    char *full = path[0] == '/' || getcwd(cwd, sizeof cwd) == NULL
                     ? xstrndup(path, strlen(path))
                     : format("%s/%s", cwd, path);
    size_t len = strlen(full);
    char *normal = xmalloc(len + 2);
    size_t n = 0;
    const char *p = full;
    while (*p) {
        while (*p == '/') p++;
        const char *start = p;
        while (*p && *p != '/') p++;
        size_t part = (size_t)(p - start);
        if (part == 0 || (part == 1 && start[0] == '.')) {
            continue;
        }
        if (part == 2 && start[0] == '.' && start[1] == '.') {
            while (n > 0 && normal[n - 1] != '/') n--;
            if (n > 0) n--;
            continue;
        }
        normal[n++] = '/';
        memcpy(normal + n, start, part);
        n += part;
    }
    normal[n] = '\0';
    bool seen = false;
    struct stat info;
    /* The path, each directory above it, and "/" last (a grant of "/"). */
    for (;;) {
        seen = lstat(n > 0 ? normal : "/", &info) == 0;
        if (seen || n == 0) break;
        while (n > 0 && normal[n - 1] != '/') n--;
        if (n > 0) n--;
        normal[n] = '\0';
    }
    free(normal);
    free(full);
    return seen;
}

void toolhost_file_error(toolhost_result *out, const char *path, int err) {
    if (!within_grants(path)) {
        toolhost_error(out, "permission_denied", false,
                       "%s is outside this tool's file grants: use a path under a directory the "
                       "tool is granted, or grant one in toolhost.toml (files = [{ host = "
                       "\"./data\", guest = \"/data\", mode = \"read-only\" }])",
                       path);
    } else if (err == ENOENT || err == ENOTDIR) {
        toolhost_error(out, "not_found", true, "%s: %s", path, strerror(err));
    } else if (err == EACCES || err == EPERM || err == EROFS || err == ENOTCAPABLE) {
        toolhost_error(out, "permission_denied", false,
                       "%s: %s (a write to a read-only grant? grant mode = \"read-write\" in "
                       "toolhost.toml)",
                       path, strerror(err));
    } else {
        toolhost_error(out, "io", false, "%s: %s", path, strerror(err));
    }
}

/* --- The contract's exports ------------------------------------------------------ */

/* The length of the well-formed UTF-8 sequence at s[i] (1 to 4), or 0 when
 * there is none: no overlong forms, surrogates or code points past
 * U+10FFFF, which the contract's strings refuse. */
static size_t utf8_sequence(const uint8_t *s, size_t i, size_t len) {
    uint8_t c = s[i];
    size_t extra;
    uint8_t low = 0x80, high = 0xBF; /* the range of the second byte */
    if (c < 0x80) {
        return 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
        extra = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
        extra = 2;
        if (c == 0xE0) low = 0xA0;
        if (c == 0xED) high = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        extra = 3;
        if (c == 0xF0) low = 0x90;
        if (c == 0xF4) high = 0x8F;
    } else {
        return 0;
    }
    if (extra > len - i - 1) {
        return 0;
    }
    for (size_t k = 1; k <= extra; k++) {
        uint8_t b = s[i + k];
        if (k == 1 ? (b < low || b > high) : (b & 0xC0) != 0x80) {
            return 0;
        }
    }
    return extra + 1;
}

bool toolhost_utf8_valid(const uint8_t *s, size_t len) {
    for (size_t i = 0, n; i < len; i += n) {
        if ((n = utf8_sequence(s, i, len)) == 0) {
            return false;
        }
    }
    return true;
}

/* Replace each byte of `s` that is not part of well-formed UTF-8 with '?',
 * in place: the contract's strings are UTF-8, and one that is not would fail
 * the call instead of carrying what the tool meant to say. */
static void repair_utf8(uint8_t *s, size_t len) {
    for (size_t i = 0, n; i < len; i += n) {
        if ((n = utf8_sequence(s, i, len)) == 0) {
            s[i] = '?';
            n = 1;
        }
    }
}

static void repair_string(toolbox_string_t *s) { repair_utf8(s->ptr, s->len); }

/* The bindings link to wit-bindgen's object file of the world's types;
 * `toolhost componentize` embeds those types itself, from the contract the
 * host carries, so this stands in for the object file. */
void __component_type_object_force_link_toolbox(void) {}

void exports_toolhost_tool_tool_tools(exports_toolhost_tool_tool_list_tool_spec_t *ret) {
    ret->len = toolhost_tool_count;
    ret->ptr = xmalloc(toolhost_tool_count * sizeof *ret->ptr);
    for (size_t i = 0; i < toolhost_tool_count; i++) {
        const toolhost_tool *tool = &toolhost_tools[i];
        exports_toolhost_tool_tool_tool_spec_t *spec = &ret->ptr[i];
        spec->name = owned(tool->name);
        spec->title.is_some = tool->title != NULL;
        if (tool->title != NULL) {
            spec->title.val = owned(tool->title);
        }
        spec->description = owned(tool->description);
        spec->input_schema = owned(tool->input_schema);
        spec->output_schema.is_some = tool->output_schema != NULL;
        if (tool->output_schema != NULL) {
            spec->output_schema.val = owned(tool->output_schema);
        }
        spec->hints = tool->hints;
    }
}

bool exports_toolhost_tool_tool_call(toolbox_string_t *name, toolbox_string_t *arguments,
                                     exports_toolhost_tool_tool_call_context_t *context,
                                     exports_toolhost_tool_tool_tool_output_t *ret,
                                     exports_toolhost_tool_tool_tool_error_t *err) {
    const toolhost_tool *tool = NULL;
    for (size_t i = 0; i < toolhost_tool_count; i++) {
        const char *candidate = toolhost_tools[i].name;
        if (strlen(candidate) == name->len && memcmp(candidate, name->ptr, name->len) == 0) {
            tool = &toolhost_tools[i];
        }
    }
    toolhost_result result = {0};
    if (tool == NULL) {
        fail(&result, "unknown_tool", false,
             format("this component has no tool named \"%.*s\"", (int)name->len, name->ptr));
    } else {
        char *json = xstrndup((const char *)arguments->ptr, arguments->len);
        char *call_id = xstrndup((const char *)context->call_id.ptr, context->call_id.len);
        char *injected = context->context.is_some
                             ? xstrndup((const char *)context->context.val.ptr,
                                        context->context.val.len)
                             : NULL;
        toolhost_call call = {json, arguments->len, call_id, context->deadline_ms, injected};
        tool->run(&call, &result);
        free(json);
        free(call_id);
        free(injected);
    }
    /* The arguments are this function's to free. */
    toolbox_string_free(name);
    toolbox_string_free(arguments);
    /* The generated free of a call context leaves its injected context. */
    if (context->context.is_some) {
        toolbox_string_free(&context->context.val);
    }
    exports_toolhost_tool_tool_call_context_free(context);

    if (result.failed) {
        for (size_t i = 0; i < result.len; i++) {
            toolhost_tool_types_content_block_t *block = &result.blocks[i];
            /* The generated free of a block leaves a media block's bytes. */
            if (block->tag == TOOLHOST_TOOL_TYPES_CONTENT_BLOCK_IMAGE ||
                block->tag == TOOLHOST_TOOL_TYPES_CONTENT_BLOCK_AUDIO) {
                free(block->val.image.data.ptr);
                block->val.image.data.ptr = NULL;
                block->val.image.data.len = 0;
            }
            toolhost_tool_types_content_block_free(block);
        }
        free(result.blocks);
        free(result.structured);
        err->kind = (toolbox_string_t){(uint8_t *)result.kind, strlen(result.kind)};
        err->message = (toolbox_string_t){(uint8_t *)result.message, strlen(result.message)};
        repair_string(&err->kind);
        repair_string(&err->message);
        err->retryable = result.retryable;
        return false;
    }
    for (size_t i = 0; i < result.len; i++) {
        toolhost_tool_types_content_block_t *block = &result.blocks[i];
        if (block->tag == TOOLHOST_TOOL_TYPES_CONTENT_BLOCK_TEXT) {
            repair_string(&block->val.text);
        } else if (block->tag == TOOLHOST_TOOL_TYPES_CONTENT_BLOCK_IMAGE ||
                   block->tag == TOOLHOST_TOOL_TYPES_CONTENT_BLOCK_AUDIO) {
            repair_string(&block->val.image.mime_type);
        }
    }
    ret->content.ptr = result.blocks;
    ret->content.len = result.len;
    ret->structured.is_some = result.structured != NULL;
    if (result.structured != NULL) {
        ret->structured.val =
            (toolbox_string_t){(uint8_t *)result.structured, strlen(result.structured)};
        repair_string(&ret->structured.val);
    }
    ret->artifact.is_some = false;
    return true;
}

/* --- The host ------------------------------------------------------------------- */

void toolhost_log(toolhost_level level, const char *format, ...) {
    va_list args;
    va_start(args, format);
    char *text = vformat(format, args);
    va_end(args);
    toolbox_string_t message = borrowed(text);
    toolhost_tool_host_log((toolhost_tool_host_level_t)level, &message);
    free(text);
}

char *toolhost_config(const char *key) {
    toolbox_string_t name = borrowed(key);
    toolbox_string_t value;
    if (!toolhost_tool_host_config(&name, &value)) {
        return NULL;
    }
    char *text = xstrndup((const char *)value.ptr, value.len);
    toolbox_string_free(&value);
    return text;
}

void toolhost_progress(double done, double total, const char *message) {
    toolbox_string_t text = borrowed(message != NULL ? message : "");
    toolhost_tool_host_progress(done, total < 0 ? NULL : &total, message != NULL ? &text : NULL);
}

/* --- HTTP ------------------------------------------------------------------------ */

static void http_failed(toolhost_result *out, const char *origin,
                        wasi_http_types_error_code_t *code) {
    if (code->tag == WASI_HTTP_TYPES_ERROR_CODE_HTTP_REQUEST_DENIED) {
        toolhost_error(out, "permission_denied", false,
                       "request to %s denied: the tool is not granted that host; add it to "
                       "allow_hosts in toolhost.toml",
                       origin);
    } else {
        toolhost_error(out, "unavailable", true, "request to %s failed (wasi:http error %d)",
                       origin, code->tag);
    }
    wasi_http_types_error_code_free(code);
}

static bool method_of(const char *name, wasi_http_types_method_t *method) {
    static const char *const known[] = {"GET",     "HEAD",    "POST",  "PUT",  "DELETE",
                                        "CONNECT", "OPTIONS", "TRACE", "PATCH"};
    for (uint8_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (strcmp(name, known[i]) == 0) {
            method->tag = i;
            return true;
        }
    }
    if (name[0] == '\0') {
        return false;
    }
    method->tag = WASI_HTTP_TYPES_METHOD_OTHER;
    method->val.other = borrowed(name);
    return true;
}

bool toolhost_http(const char *method_name, const char *url, const char *content_type,
                   const uint8_t *body, size_t body_len, toolhost_http_response *response,
                   toolhost_result *out) {
    memset(response, 0, sizeof *response);
    wasi_http_types_scheme_t scheme;
    const char *rest;
    if (strncasecmp(url, "https://", 8) == 0) {
        scheme.tag = WASI_HTTP_TYPES_SCHEME_HTTPS;
        rest = url + 8;
    } else if (strncasecmp(url, "http://", 7) == 0) {
        scheme.tag = WASI_HTTP_TYPES_SCHEME_HTTP;
        rest = url + 7;
    } else {
        toolhost_error(out, "invalid_input", true,
                       "invalid URL: only absolute http:// and https:// URLs are supported");
        return false;
    }
    size_t authority_len = strcspn(rest, "/?#");
    if (authority_len == 0) {
        toolhost_error(out, "invalid_input", true, "invalid URL: it has no host");
        return false;
    }
    wasi_http_types_method_t method;
    if (!method_of(method_name, &method)) {
        toolhost_error(out, "invalid_input", true, "invalid HTTP method \"%s\"", method_name);
        return false;
    }
    char *authority = xstrndup(rest, authority_len);
    char *origin = format("%.*s%s", (int)(rest - url), url, authority);
    /* The fragment stays with the client, as browsers do. */
    const char *path_start = rest + authority_len;
    size_t path_len = strcspn(path_start, "#");
    char *path = path_len == 0 || path_start[0] != '/' ? format("/%.*s", (int)path_len, path_start)
                                                       : xstrndup(path_start, path_len);

    wasi_http_types_own_fields_t headers = wasi_http_types_constructor_fields();
    wasi_http_types_header_error_t header_error;
    if (content_type != NULL) {
        wasi_http_types_field_name_t header = borrowed("content-type");
        wasi_http_types_field_value_t value = {(uint8_t *)content_type, strlen(content_type)};
        if (!wasi_http_types_method_fields_append(wasi_http_types_borrow_fields(headers), &header,
                                                  &value, &header_error)) {
            wasi_http_types_fields_drop_own(headers);
            toolhost_error(out, "invalid_input", true,
                           "the content type \"%s\" is not a valid header value", content_type);
            free(authority);
            free(origin);
            free(path);
            return false;
        }
    }
    if (body != NULL) {
        /* A known length, so servers that refuse chunked bodies take it. */
        char length[24];
        snprintf(length, sizeof length, "%zu", body_len);
        wasi_http_types_field_name_t header = borrowed("content-length");
        wasi_http_types_field_value_t value = {(uint8_t *)length, strlen(length)};
        wasi_http_types_method_fields_append(wasi_http_types_borrow_fields(headers), &header,
                                             &value, &header_error);
    }
    wasi_http_types_own_outgoing_request_t request =
        wasi_http_types_constructor_outgoing_request(headers);
    wasi_http_types_borrow_outgoing_request_t req = wasi_http_types_borrow_outgoing_request(request);
    toolbox_string_t authority_text = borrowed(authority);
    toolbox_string_t path_text = borrowed(path);
    bool ok = wasi_http_types_method_outgoing_request_set_method(req, &method) &&
              wasi_http_types_method_outgoing_request_set_scheme(req, &scheme) &&
              wasi_http_types_method_outgoing_request_set_authority(req, &authority_text) &&
              wasi_http_types_method_outgoing_request_set_path_with_query(req, &path_text);
    free(authority);
    free(path);
    if (!ok) {
        wasi_http_types_outgoing_request_drop_own(request);
        toolhost_error(out, "invalid_input", true, "the host refused the request to %s", origin);
        free(origin);
        return false;
    }

    /* The request goes to the host before its body is written: the body
     * stream's buffer is small, and the host reads it only once the request
     * is on its way, so a body written first would block for good. */
    wasi_http_types_own_outgoing_body_t outgoing;
    wasi_http_types_method_outgoing_request_body(req, &outgoing);
    wasi_http_types_error_code_t code;
    wasi_http_types_own_future_incoming_response_t future;
    if (!wasi_http_outgoing_handler_handle(request, NULL, &future, &code)) {
        wasi_http_types_outgoing_body_drop_own(outgoing);
        http_failed(out, origin, &code);
        free(origin);
        return false;
    }
    wasi_http_types_own_output_stream_t stream;
    wasi_http_types_method_outgoing_body_write(wasi_http_types_borrow_outgoing_body(outgoing),
                                               &stream);
    /* blocking-write-and-flush takes at most 4096 bytes a call. A failed
     * write is reported by the response, which says best why. */
    for (size_t at = 0; body != NULL && at < body_len; at += 4096) {
        size_t n = body_len - at < 4096 ? body_len - at : 4096;
        toolbox_list_u8_t chunk = {(uint8_t *)body + at, n};
        wasi_io_streams_stream_error_t stream_error;
        if (!wasi_io_streams_method_output_stream_blocking_write_and_flush(
                wasi_io_streams_borrow_output_stream(stream), &chunk, &stream_error)) {
            if (stream_error.tag != WASI_IO_STREAMS_STREAM_ERROR_CLOSED) {
                wasi_io_error_error_drop_own(stream_error.val.last_operation_failed);
            }
            break;
        }
    }
    wasi_io_streams_output_stream_drop_own(stream);
    if (!wasi_http_types_static_outgoing_body_finish(outgoing, NULL, &code)) {
        wasi_http_types_error_code_free(&code);
    }

    wasi_http_types_borrow_future_incoming_response_t pending =
        wasi_http_types_borrow_future_incoming_response(future);
    wasi_io_poll_own_pollable_t ready =
        wasi_http_types_method_future_incoming_response_subscribe(pending);
    wasi_io_poll_method_pollable_block(wasi_io_poll_borrow_pollable(ready));
    wasi_io_poll_pollable_drop_own(ready);
    wasi_http_types_result_result_own_incoming_response_error_code_void_t got;
    wasi_http_types_method_future_incoming_response_get(pending, &got);
    wasi_http_types_future_incoming_response_drop_own(future);
    if (got.is_err || got.val.ok.is_err) {
        if (got.is_err) {
            toolhost_error(out, "unavailable", true, "request to %s failed", origin);
        } else {
            http_failed(out, origin, &got.val.ok.val.err);
        }
        free(origin);
        return false;
    }
    wasi_http_types_own_incoming_response_t incoming = got.val.ok.val.ok;
    wasi_http_types_borrow_incoming_response_t resp =
        wasi_http_types_borrow_incoming_response(incoming);
    response->status = wasi_http_types_method_incoming_response_status(resp);

    wasi_http_types_own_incoming_body_t incoming_body;
    wasi_http_types_method_incoming_response_consume(resp, &incoming_body);
    wasi_http_types_own_input_stream_t input;
    wasi_http_types_method_incoming_body_stream(
        wasi_http_types_borrow_incoming_body(incoming_body), &input);
    size_t cap = 4096;
    char *data = xmalloc(cap + 1);
    size_t len = 0;
    bool failed = false;
    for (;;) {
        toolbox_list_u8_t chunk;
        wasi_io_streams_stream_error_t stream_error;
        if (!wasi_io_streams_method_input_stream_blocking_read(
                wasi_io_streams_borrow_input_stream(input), 64 * 1024, &chunk, &stream_error)) {
            if (stream_error.tag != WASI_IO_STREAMS_STREAM_ERROR_CLOSED) {
                wasi_io_error_error_drop_own(stream_error.val.last_operation_failed);
                toolhost_error(out, "unavailable", true, "reading the response from %s failed",
                               origin);
                failed = true;
            }
            break;
        }
        if (len + chunk.len > MAX_HTTP_BODY) {
            toolbox_list_u8_free(&chunk);
            toolhost_error(out, "unavailable", false,
                           "the response from %s is larger than the %u-byte limit", origin,
                           MAX_HTTP_BODY);
            failed = true;
            break;
        }
        if (len + chunk.len > cap) {
            while (len + chunk.len > cap) cap *= 2;
            data = realloc(data, cap + 1);
            if (data == NULL) abort();
        }
        memcpy(data + len, chunk.ptr, chunk.len);
        len += chunk.len;
        toolbox_list_u8_free(&chunk);
    }
    wasi_io_streams_input_stream_drop_own(input);
    wasi_http_types_future_trailers_drop_own(
        wasi_http_types_static_incoming_body_finish(incoming_body));
    wasi_http_types_incoming_response_drop_own(incoming);
    free(origin);
    if (failed) {
        free(data);
        return false;
    }
    data[len] = '\0';
    response->body = data;
    response->body_len = len;
    return true;
}

void toolhost_http_response_free(toolhost_http_response *response) {
    free(response->body);
    response->body = NULL;
    response->body_len = 0;
}

/* --- Key-value stores --------------------------------------------------------------- */

/* The host sends every failure but a denial as `other("KIND: message")`;
 * each KIND becomes the error kind a tool in another language gets. */
static const struct {
    const char *sent;
    const char *kind;
    bool retryable;
} STORE_FAILURES[] = {
    {"quota-exceeded", "quota_exceeded", false},
    {"too-large", "invalid_input", true},
    {"not-a-counter", "invalid_input", true},
    {"invalid-cursor", "invalid_input", true},
    {"limit", "limit", false},
    {"unavailable", "unavailable", true},
    /* Another process holds the embedded store's file: not until the
     * operator acts. */
    {"in-use", "unavailable", false},
};

static void store_failed(toolhost_result *out, const char *store, wasi_keyvalue_store_error_t *e) {
    if (e->tag == WASI_KEYVALUE_STORE_ERROR_OTHER) {
        const char *text = (const char *)e->val.other.ptr;
        size_t len = e->val.other.len;
        const char *kind = "store";
        bool retryable = false;
        for (size_t i = 0; i < sizeof STORE_FAILURES / sizeof STORE_FAILURES[0]; i++) {
            size_t n = strlen(STORE_FAILURES[i].sent);
            if (len > n + 1 && memcmp(text, STORE_FAILURES[i].sent, n) == 0 && text[n] == ':' &&
                text[n + 1] == ' ') {
                kind = STORE_FAILURES[i].kind;
                retryable = STORE_FAILURES[i].retryable;
                break;
            }
        }
        toolhost_error(out, kind, retryable, "store %s: %.*s", store, (int)len, text);
    } else {
        toolhost_error(out, "permission_denied", false,
                       "the store %s is not available to this tool: grant it in toolhost.toml "
                       "(stores = [\"%s\"], with a [store.%s] table)",
                       store, store, store);
    }
    wasi_keyvalue_store_error_free(e);
}

static bool open_store(const char *store, wasi_keyvalue_store_own_bucket_t *bucket,
                       toolhost_result *out) {
    toolbox_string_t name = borrowed(store);
    wasi_keyvalue_store_error_t e;
    if (!wasi_keyvalue_store_open(&name, bucket, &e)) {
        store_failed(out, store, &e);
        return false;
    }
    return true;
}

char *toolhost_kv_get(const char *store, const char *key, size_t *len, bool *failed,
                      toolhost_result *out) {
    *failed = false;
    wasi_keyvalue_store_own_bucket_t bucket;
    if (!open_store(store, &bucket, out)) {
        *failed = true;
        return NULL;
    }
    toolbox_string_t name = borrowed(key);
    toolbox_option_list_u8_t value;
    wasi_keyvalue_store_error_t e;
    char *text = NULL;
    if (!wasi_keyvalue_store_method_bucket_get(wasi_keyvalue_store_borrow_bucket(bucket), &name,
                                               &value, &e)) {
        store_failed(out, store, &e);
        *failed = true;
    } else if (value.is_some) {
        text = xstrndup((const char *)value.val.ptr, value.val.len);
        if (len != NULL) *len = value.val.len;
        /* The generated free of an option of bytes leaves the bytes. */
        toolbox_list_u8_free(&value.val);
    }
    wasi_keyvalue_store_bucket_drop_own(bucket);
    return text;
}

bool toolhost_kv_set(const char *store, const char *key, const uint8_t *value, size_t len,
                     toolhost_result *out) {
    wasi_keyvalue_store_own_bucket_t bucket;
    if (!open_store(store, &bucket, out)) {
        return false;
    }
    toolbox_string_t name = borrowed(key);
    toolbox_list_u8_t bytes = {(uint8_t *)value, len};
    wasi_keyvalue_store_error_t e;
    bool ok = wasi_keyvalue_store_method_bucket_set(wasi_keyvalue_store_borrow_bucket(bucket),
                                                    &name, &bytes, &e);
    if (!ok) {
        store_failed(out, store, &e);
    }
    wasi_keyvalue_store_bucket_drop_own(bucket);
    return ok;
}

bool toolhost_kv_delete(const char *store, const char *key, toolhost_result *out) {
    wasi_keyvalue_store_own_bucket_t bucket;
    if (!open_store(store, &bucket, out)) {
        return false;
    }
    toolbox_string_t name = borrowed(key);
    wasi_keyvalue_store_error_t e;
    bool ok = wasi_keyvalue_store_method_bucket_delete(wasi_keyvalue_store_borrow_bucket(bucket),
                                                       &name, &e);
    if (!ok) {
        store_failed(out, store, &e);
    }
    wasi_keyvalue_store_bucket_drop_own(bucket);
    return ok;
}

bool toolhost_kv_increment(const char *store, const char *key, uint64_t delta, uint64_t *value,
                           toolhost_result *out) {
    wasi_keyvalue_store_own_bucket_t bucket;
    if (!open_store(store, &bucket, out)) {
        return false;
    }
    toolbox_string_t name = borrowed(key);
    wasi_keyvalue_store_error_t e;
    bool ok = wasi_keyvalue_atomics_increment(wasi_keyvalue_store_borrow_bucket(bucket), &name,
                                              delta, value, &e);
    if (!ok) {
        store_failed(out, store, &e);
    }
    wasi_keyvalue_store_bucket_drop_own(bucket);
    return ok;
}
