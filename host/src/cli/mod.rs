//! The `toolhost` binary's own parts beside `main.rs` (not the library's):
//! the terminal and the prompts a person answers at it.

pub(crate) mod prompts;
pub(crate) mod terminal;
