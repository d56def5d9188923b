/*
 * A tool that acts while it is being instantiated: its constructor, which
 * wasi-libc runs when the instance is made, writes a log line. The host must
 * never hand such an instance, made ahead of its call, to a call (its line
 * belongs to no call); host/tests/all/ready.rs. Built by scripts/build-tools.sh.
 */
#include "toolhost.h"

__attribute__((constructor)) static void early(void) {
    toolhost_log(TOOLHOST_INFO, "made");
}

static void hello(const toolhost_call *call, toolhost_result *out) {
    (void)call;
    toolhost_text(out, "hello");
}

TOOLHOST_TOOLS({
    .name = "hello",
    .description = "Answers hello; logs a line each time an instance of it is made",
    .input_schema = "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}",
    .run = hello,
});
