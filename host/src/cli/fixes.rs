//! How the library's messages spell each fix for `toolhost` users: the flag
//! they must pass. The library's defaults name its own settings
//! ([`toolhost::Fixes`]); the binary, which owns the flags, spells them
//! here, in one place.

use toolhost::{Fixes, RefuseWithFix};

/// The fixes as `toolhost`'s flags spell them.
pub(crate) fn flags() -> Fixes {
    let mut fixes = Fixes::default();
    fixes.max_body = "raise it with `toolhost serve --max-body`".into();
    fixes.max_batch = "raise it with `toolhost serve --max-batch`".into();
    fixes.allow_origins = "the operator can allow it with --allow-origin".into();
    fixes.listen = "choose another with --listen".into();
    fixes.watch = "--watch".into();
    fixes.token = "pass --token-env NAME with the token in environment variable NAME".into();
    fixes.approve_all = "the operator can run `toolhost serve --yes`".into();
    fixes.max_steps = "raise max_steps in [model] or pass --max-steps".into();
    fixes
}

/// The approver of `toolhost call` and `toolhost run` without `--yes` when
/// nobody can be asked: it refuses, naming the flag that approves.
pub(crate) fn refuse_without_yes() -> RefuseWithFix {
    RefuseWithFix::new("the operator can pass --yes")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every fix the binary spells names a flag it has.
    #[test]
    fn every_fix_names_a_flag_of_toolhost() {
        for (name, fix) in flags().each() {
            let flag = match name {
                "max_body" => "--max-body",
                "max_batch" => "--max-batch",
                "allow_origins" => "--allow-origin",
                "listen" => "--listen",
                "watch" => "--watch",
                "token" => "--token-env",
                "approve_all" => "--yes",
                "max_steps" => "--max-steps",
                other => panic!("the binary spells no flag for the fix of {other}"),
            };
            assert!(fix.contains(flag), "{name}: {fix}");
        }
    }
}
