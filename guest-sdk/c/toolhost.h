/*
 * Write toolhost tools in C.
 *
 * A tool is a function that reads its arguments and fills in a result, and a
 * table entry naming it:
 *
 *     #include "toolhost.h"
 *
 *     static void greet(const toolhost_call *call, toolhost_result *out) {
 *         char *name = toolhost_arg_string(call, "name");
 *         if (name == NULL || name[0] == '\0') {
 *             toolhost_error(out, "invalid_input", true, "`name` is empty: say who to greet");
 *         } else {
 *             toolhost_text(out, "Hello, %s!", name);
 *         }
 *         free(name);
 *     }
 *
 *     TOOLHOST_TOOLS({
 *         .name = "greet",
 *         .description = "Greet someone by name",
 *         .input_schema = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"}},"
 *                         "\"required\":[\"name\"],\"additionalProperties\":false}",
 *         .hints = TOOLHOST_READ_ONLY | TOOLHOST_IDEMPOTENT,
 *         .run = greet,
 *     });
 *
 * The host checks every call's arguments against `input_schema` before the
 * tool runs, so a handler reads arguments that fit it. Strings the SDK
 * returns are NUL-terminated, allocated with malloc, and the caller's to
 * free. Every call runs in a fresh instance: nothing a call leaves in memory
 * is seen by the next.
 *
 * Build: clang for wasm32-wasi (wasi-libc), as a reactor, with
 * bindings/toolbox.c; then `toolhost componentize` makes the component (see
 * the scaffold's build.sh).
 */
#ifndef TOOLHOST_H
#define TOOLHOST_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "bindings/toolbox.h"

/* Behaviour hints, as MCP's tool annotations. */
#define TOOLHOST_READ_ONLY TOOLHOST_TOOL_TYPES_HINTS_READ_ONLY
#define TOOLHOST_DESTRUCTIVE TOOLHOST_TOOL_TYPES_HINTS_DESTRUCTIVE
#define TOOLHOST_IDEMPOTENT TOOLHOST_TOOL_TYPES_HINTS_IDEMPOTENT
#define TOOLHOST_OPEN_WORLD TOOLHOST_TOOL_TYPES_HINTS_OPEN_WORLD

/* Log levels. */
typedef enum {
    TOOLHOST_TRACE = TOOLHOST_TOOL_HOST_LEVEL_TRACE,
    TOOLHOST_DEBUG = TOOLHOST_TOOL_HOST_LEVEL_DEBUG,
    TOOLHOST_INFO = TOOLHOST_TOOL_HOST_LEVEL_INFO,
    TOOLHOST_WARN = TOOLHOST_TOOL_HOST_LEVEL_WARN,
    TOOLHOST_ERROR = TOOLHOST_TOOL_HOST_LEVEL_ERROR,
} toolhost_level;

/* The call in progress: its arguments and facts about it. */
typedef struct toolhost_call toolhost_call;

/* What a handler answers: content blocks, or an error. */
typedef struct toolhost_result toolhost_result;

/* A tool's handler. */
typedef void (*toolhost_handler)(const toolhost_call *call, toolhost_result *out);

/* A tool, as listed in TOOLHOST_TOOLS. */
typedef struct {
    /* `^[A-Za-z0-9_-]{1,64}$`, unique among the host's tools. */
    const char *name;
    /* For people; NULL lets the host derive one from the name. */
    const char *title;
    /* For the model: what the tool does and when to use it. */
    const char *description;
    /* JSON Schema of the arguments object. */
    const char *input_schema;
    /* JSON Schema of toolhost_structured's JSON (an object), or NULL. */
    const char *output_schema;
    /* TOOLHOST_READ_ONLY | TOOLHOST_IDEMPOTENT | ... */
    uint8_t hints;
    toolhost_handler run;
} toolhost_tool;

/* The component's tools; define them once, with TOOLHOST_TOOLS. */
extern const toolhost_tool toolhost_tools[];
extern const size_t toolhost_tool_count;

#define TOOLHOST_TOOLS(...)                                                    \
    const toolhost_tool toolhost_tools[] = {__VA_ARGS__};                      \
    const size_t toolhost_tool_count = sizeof(toolhost_tools) / sizeof(toolhost_tools[0])

/* --- Arguments ------------------------------------------------------------ */

/* Top-level string argument `key`, unescaped (malloc'd), or NULL when absent
 * or not a string. A string holding "\u0000" is cut there: use
 * toolhost_arg_string_n for binary-safe text. */
char *toolhost_arg_string(const toolhost_call *call, const char *key);
/* As toolhost_arg_string, also giving its length in bytes. */
char *toolhost_arg_string_n(const toolhost_call *call, const char *key, size_t *len);
/* Top-level number argument `key` into *out; false when absent or not a number. */
bool toolhost_arg_number(const toolhost_call *call, const char *key, double *out);
/* Top-level integer argument `key` into *out; false when absent, not a
 * number, not whole or out of int64_t's range. */
bool toolhost_arg_int(const toolhost_call *call, const char *key, int64_t *out);
/* Top-level boolean argument `key` into *out; false when absent or not a boolean. */
bool toolhost_arg_bool(const toolhost_call *call, const char *key, bool *out);
/* Whether top-level argument `key` is present and not null. */
bool toolhost_arg_present(const toolhost_call *call, const char *key);
/* The whole arguments object as JSON text (NUL-terminated; not to be freed). */
const char *toolhost_args_json(const toolhost_call *call);

/* The model's tool_call_id (not to be freed). */
const char *toolhost_call_id(const toolhost_call *call);
/* Milliseconds left before the host stops the call. */
uint64_t toolhost_deadline_ms(const toolhost_call *call);
/* The application's context as JSON, or NULL (not to be freed). */
const char *toolhost_context(const toolhost_call *call);

/* --- Results -------------------------------------------------------------- */

/* Append a text block, printf-style. Bytes that are not UTF-8 (the
 * contract's strings are) are sent as '?', as in every string the SDK
 * returns. */
void toolhost_text(toolhost_result *out, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
/* Append an image block (e.g. "image/png"); the bytes are copied. */
void toolhost_image(toolhost_result *out, const char *mime_type, const uint8_t *data, size_t len);
/* Set the structured result: JSON matching the tool's output_schema. */
void toolhost_structured(toolhost_result *out, const char *json);
/* Whether bytes [0, len) are well-formed UTF-8, as the contract's strings
 * must be (no overlong forms, surrogates or code points past U+10FFFF). */
bool toolhost_utf8_valid(const uint8_t *s, size_t len);
/* Fail the call with a typed error, printf-style: `kind` is a short class
 * (e.g. "invalid_input", "not_found"), the message is for the model and says
 * what to change, and `retryable` whether calling again can help. Content
 * appended before is dropped. */
void toolhost_error(toolhost_result *out, const char *kind, bool retryable, const char *format, ...)
    __attribute__((format(printf, 4, 5)));
/* Fail the call with the file error `err` (an errno) on `path`. A path
 * outside every directory the tool is granted is reported as
 * permission_denied, not retryable, with the grant that would allow it; WASI
 * itself reports it as a missing file. */
void toolhost_file_error(toolhost_result *out, const char *path, int err);

/* --- The host --------------------------------------------------------------- */

/* Write to the host's log, printf-style. */
void toolhost_log(toolhost_level level, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
/* Config value `key` granted in the manifest (`config = { key = "..." }`),
 * malloc'd, or NULL. */
char *toolhost_config(const char *key);
/* Report progress: `done` out of `total` (negative: unknown), with an
 * optional message (NULL: none). */
void toolhost_progress(double done, double total, const char *message);

/* --- HTTP ------------------------------------------------------------------- */

/* A response: status, and the whole body (malloc'd, NUL-terminated after
 * `body_len` bytes). Free with toolhost_http_response_free. */
typedef struct {
    uint16_t status;
    char *body;
    size_t body_len;
} toolhost_http_response;

/* Send `method` ("GET", "POST", ...) to absolute http(s) `url`, with
 * `content_type` and `body` when body is not NULL. On failure, fills `out`
 * with the error (a refused origin as permission_denied naming
 * `allow_hosts`) and returns false. Response bodies over 8 MiB are refused.
 * Redirects are not followed: a 3xx response is returned as it is, its
 * Location for the tool to request again if it wants. */
bool toolhost_http(const char *method, const char *url, const char *content_type,
                   const uint8_t *body, size_t body_len, toolhost_http_response *response,
                   toolhost_result *out);
void toolhost_http_response_free(toolhost_http_response *response);

/* --- Key-value stores --------------------------------------------------------- */

/* Value of `key` in store `store` (malloc'd, NUL-terminated after *len
 * bytes), or NULL when there is none. On failure (a store not granted:
 * permission_denied naming `stores = [...]`), fills `out` and returns NULL
 * with *failed set. */
char *toolhost_kv_get(const char *store, const char *key, size_t *len, bool *failed,
                      toolhost_result *out);
/* Set `key` in store `store`; on failure fills `out` and returns false. */
bool toolhost_kv_set(const char *store, const char *key, const uint8_t *value, size_t len,
                     toolhost_result *out);
/* Delete `key` from store `store`; on failure fills `out` and returns false. */
bool toolhost_kv_delete(const char *store, const char *key, toolhost_result *out);
/* Add `delta` to the counter `key` in store `store` into *value; on failure
 * fills `out` and returns false. */
bool toolhost_kv_increment(const char *store, const char *key, uint64_t delta, uint64_t *value,
                           toolhost_result *out);

#endif
