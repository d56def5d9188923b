/*
 * The C SDK's probe: one tool per helper, for the host's tests
 * (host/tests/all/c_sdk.rs). Built by scripts/build-tools.sh.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "toolhost.h"

#define SCHEMA(props, required)                                                    \
    "{\"type\":\"object\",\"properties\":{" props "},\"required\":[" required "],"   \
    "\"additionalProperties\":false}"

/* POST `n` bytes to `url`; answers "STATUS BODY". */
static void post(const toolhost_call *call, toolhost_result *out) {
    char *url = toolhost_arg_string(call, "url");
    int64_t n = 0;
    toolhost_arg_int(call, "n", &n);
    uint8_t *body = malloc((size_t)n + 1);
    memset(body, 'x', (size_t)n);
    toolhost_http_response response;
    if (toolhost_http("POST", url, "application/octet-stream", body, (size_t)n, &response, out)) {
        toolhost_text(out, "%u %s", response.status, response.body);
        toolhost_http_response_free(&response);
    }
    free(body);
    free(url);
}

/* Adds one to `key` in store `store`, then reads it back as set by kv_set. */
static void count(const toolhost_call *call, toolhost_result *out) {
    char *store = toolhost_arg_string(call, "store");
    char *key = toolhost_arg_string(call, "key");
    uint64_t value;
    if (toolhost_kv_increment(store, key, 1, &value, out)) {
        char text[32];
        snprintf(text, sizeof text, "seen %llu", (unsigned long long)value);
        bool failed;
        size_t len;
        if (toolhost_kv_set(store, "last", (const uint8_t *)text, strlen(text), out)) {
            char *last = toolhost_kv_get(store, "last", &len, &failed, out);
            if (!failed) {
                toolhost_text(out, "%s", last ? last : "(none)");
            }
            free(last);
        }
    }
    free(store);
    free(key);
}

/* Reads the file at `path`, reporting errors with toolhost_file_error. */
static void read_file(const toolhost_call *call, toolhost_result *out) {
    char *path = toolhost_arg_string(call, "path");
    FILE *file = fopen(path, "r");
    if (file == NULL) {
        toolhost_file_error(out, path, errno);
    } else {
        char buffer[256];
        size_t n = fread(buffer, 1, sizeof buffer - 1, file);
        buffer[n] = '\0';
        fclose(file);
        toolhost_text(out, "%s", buffer);
    }
    free(path);
}

/* Echoes every kind of argument and the call's facts. */
static void args(const toolhost_call *call, toolhost_result *out) {
    double number = 0;
    int64_t integer = 0;
    bool flag = false;
    bool has_number = toolhost_arg_number(call, "number", &number);
    bool has_integer = toolhost_arg_int(call, "integer", &integer);
    bool has_flag = toolhost_arg_bool(call, "flag", &flag);
    char *text = toolhost_arg_string(call, "text");
    char *greeting = toolhost_config("greeting");
    toolhost_log(TOOLHOST_INFO, "args from %s", toolhost_call_id(call));
    toolhost_progress(1, 2, "half");
    toolhost_text(out, "number=%s%g integer=%s%lld flag=%s%d text=%s null=%d greeting=%s",
                  has_number ? "" : "!", number, has_integer ? "" : "!", (long long)integer,
                  has_flag ? "" : "!", flag, text ? text : "(none)",
                  toolhost_arg_present(call, "nothing"), greeting ? greeting : "(none)");
    toolhost_structured(out, toolhost_args_json(call));
    free(text);
    free(greeting);
}

/* Answers text and an error kind holding bytes that are not UTF-8. */
static void bad_bytes(const toolhost_call *call, toolhost_result *out) {
    bool fail = false;
    toolhost_arg_bool(call, "fail", &fail);
    if (fail) {
        toolhost_error(out, "bad\xff", false, "caf\xc3 \xed\xa0\x80 ok");
    } else {
        toolhost_text(out, "caf\xc3 \xf0\x9f\x98 ok \xc3\xa9");
    }
}

TOOLHOST_TOOLS(
    {.name = "c_post",
     .description = "POST n bytes to a URL",
     .input_schema = SCHEMA("\"url\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":16777216}",
                            "\"url\",\"n\""),
     .run = post},
    {.name = "c_count",
     .description = "Count calls in a store",
     .input_schema = SCHEMA("\"store\":{\"type\":\"string\"},\"key\":{\"type\":\"string\"}",
                            "\"store\",\"key\""),
     .run = count},
    {.name = "c_read_file",
     .description = "Read a file's first 255 bytes",
     .input_schema = SCHEMA("\"path\":{\"type\":\"string\"}", "\"path\""),
     .run = read_file},
    {.name = "c_bad_bytes",
     .description = "Answer bytes that are not UTF-8",
     .input_schema = SCHEMA("\"fail\":{\"type\":\"boolean\"}", "\"fail\""),
     .run = bad_bytes},
    {.name = "c_args",
     .description = "Echo the arguments",
     .input_schema = "{\"type\":\"object\"}",
     .output_schema = "{\"type\":\"object\"}",
     .run = args});
