//! What tool authors use besides the contract: a new tool's folder in any
//! supported language (`toolhost new`), a core WebAssembly module made into
//! a tool component (`toolhost componentize`, for C), and the lints that
//! `toolhost check` prints for what models and clients trip on.

#[cfg(feature = "cli")]
pub mod componentize;
pub mod lint;
#[cfg(feature = "cli")]
pub mod scaffold;

/// The files `toolhost new` writes, embedded by `host/build.rs`.
#[cfg(feature = "cli")]
mod files {
    include!(concat!(env!("OUT_DIR"), "/authoring_files.rs"));
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// The C SDK's bindings (`guest-sdk/c/bindings/`) are wit-bindgen's for the
    /// contract in `wit/`, by the wit-bindgen release the Rust SDK uses:
    /// change the contract and this fails until they are made again
    /// (`UPDATE_EXPECT=1 cargo test --release --workspace --lib authoring`).
    #[test]
    fn c_bindings_are_the_contracts() {
        use wit_bindgen_core::wit_parser::Resolve;
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut resolve = Resolve::default();
        let (package, _) = resolve.push_dir(root.join("wit")).unwrap();
        let world = resolve.select_world(&[package], Some("toolbox")).unwrap();
        let options = wit_bindgen_c::Opts {
            // `toolhost componentize` embeds the world's types itself, so
            // no binary object file is kept beside the sources.
            no_object_file: true,
            ..Default::default()
        };
        let mut files = wit_bindgen_core::Files::default();
        options
            .build()
            .generate(&mut resolve, world, &mut files)
            .unwrap();
        let dir = root.join("guest-sdk/c/bindings");
        let update = std::env::var_os("UPDATE_EXPECT").is_some();
        let mut names = Vec::new();
        for (name, contents) in files.iter() {
            names.push(name.to_owned());
            let path = dir.join(name);
            if update {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, contents).unwrap();
            } else {
                let kept = std::fs::read(&path).unwrap_or_default();
                assert!(
                    kept == contents,
                    "{} is not what wit-bindgen makes of wit/: run with UPDATE_EXPECT=1",
                    path.display()
                );
            }
        }
        assert_eq!(names, ["toolbox.c", "toolbox.h"]);
    }
}
