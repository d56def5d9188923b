/*
 * The {{tool}} tool. Build with ./build.sh; try it with
 * toolhost call --config toolhost.toml {{tool}} '{"name":"Ada"}'
 */
#include <string.h>

#include "toolhost.h"

/* JSON Schema of the arguments: the host checks every call against it before
 * the tool runs. Descriptions are what the model reads. */
#define ARGS_SCHEMA                                                                   \
    "{\"type\":\"object\","                                                           \
    "\"properties\":{\"name\":{\"type\":\"string\",\"description\":\"Who to greet.\"}}," \
    "\"required\":[\"name\"],\"additionalProperties\":false}"

static void hello(const toolhost_call *call, toolhost_result *out) {
    char *name = toolhost_arg_string(call, "name");
    if (name == NULL || name[strspn(name, " \t\r\n")] == '\0') {
        toolhost_error(out, "invalid_input", true, "`name` is empty: say who to greet");
    } else {
        toolhost_text(out, "Hello, %s!", name);
    }
    free(name);
}

TOOLHOST_TOOLS({
    .name = "{{tool}}",
    .description = "Greet someone by name",
    .input_schema = ARGS_SCHEMA,
    .hints = TOOLHOST_READ_ONLY | TOOLHOST_IDEMPOTENT,
    .run = hello,
});
