//! `cosign-verify --key KEY.pub REGISTRY/REPOSITORY@sha256:…`: verify an
//! image's cosign signatures (the `sha256-<digest>.sig` tag) with
//! sigstore-rs, an implementation of cosign's verification independent of
//! toolhost's. Plain HTTP (the test registry is on loopback). Exit 0 when
//! a signature by the key vouches for the digest, 1 otherwise, 2 on a usage
//! error.
//!
//! host/tests/all/registry/independent.rs runs it. By hand:
//! `cargo run --release --manifest-path tests/verifiers/sigstore-rs/Cargo.toml -- --key K IMAGE`.

use sigstore::cosign::verification_constraint::{PublicKeyVerifier, VerificationConstraintVec};
use sigstore::cosign::{ClientBuilder, CosignCapabilities};
use sigstore::registry::{Auth, ClientConfig, ClientProtocol, OciReference};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if let Err(message) = run().await {
        eprintln!("cosign-verify: {message}");
        std::process::exit(1);
    }
}

fn usage() -> ! {
    eprintln!("usage: cosign-verify --key KEY.pub REGISTRY/REPOSITORY@sha256:…");
    std::process::exit(2);
}

async fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [flag, key, image] = args.as_slice() else {
        usage();
    };
    if flag != "--key" {
        usage();
    }
    let key = std::fs::read(key).map_err(|e| format!("{key}: {e}"))?;
    let image: OciReference = image.parse().map_err(|e| format!("{image}: {e}"))?;
    let verifier = PublicKeyVerifier::try_from(&key).map_err(|e| format!("the key: {e}"))?;
    let constraints: VerificationConstraintVec = vec![Box::new(verifier)];
    let config = ClientConfig {
        protocol: ClientProtocol::Http,
        ..ClientConfig::default()
    };
    let mut client = ClientBuilder::default()
        .with_oci_client_config(config)
        .build()
        .map_err(|e| format!("the client: {e}"))?;
    let layers = client
        .trusted_signature_layers(&Auth::Anonymous, &image)
        .await
        .map_err(|e| format!("fetching the signatures: {e}"))?;
    // The layers are the signatures at the `.sig` tag whose blob hashed to
    // its descriptor and whose payload names this digest (sigstore-rs skips
    // the others); the constraint is that one of them verifies with the key.
    sigstore::cosign::verify_constraints(&layers, constraints.iter()).map_err(|_| {
        format!(
            "no signature by the key vouches for {image} ({} signature layer(s) for this digest read)",
            layers.len()
        )
    })?;
    println!("verified: a signature by the key vouches for {image}");
    Ok(())
}
