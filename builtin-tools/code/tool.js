// The code tool (code mode): `run_code` runs a program the model writes, in
// which the tools the manifest grants (`call_tools = [...]`) are async
// functions. Build with ./build.sh OUT.wasm.
//
// The sandbox is the host's, not this file's: every call is a fresh
// instance with no files, network, env or clock, under the manifest's fuel,
// time and memory limits, and every inner call goes through the host's
// dispatcher, which enforces the grants and the budget of calls. This
// component gives the program its functions and clear, typed errors.

import { toolbox } from '../../guest-sdk/js/toolhost';
import { runCode } from './program.js';
import { seal } from './seal.js';

seal();

export const tool = toolbox(runCode);
