//! Components from OCI registries (issue 26): what a reference names and
//! how a blob is named by its content. The client, the cache and signature
//! verification build on these two leaves.

pub mod digest;
pub mod lock;
pub mod reference;
pub mod verify;

pub use digest::{Digest, DigestError, Sha256};
pub use lock::{LOCK_FILE, Lock, LockError, Pin};
pub use reference::{OciRef, ReferenceError};
