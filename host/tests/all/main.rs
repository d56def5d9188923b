//! Integration tests of the host against real components built from
//! `example-tools/` and `tests/probe/` by `scripts/build-tools.sh`.

mod agent;
mod batch;
mod c_sdk;
mod cache;
mod cli;
mod code_mode;
mod containment;
mod contract;
mod e2e;
mod grants;
mod interact;
mod limits;
mod loop_controls;
mod network;
mod ready;
mod redis_server;
mod registry;
mod registry_server;
mod serve;
mod stores;
mod tool_calls;
mod util;
