// Verify that a Sigstore bundle signed by KEY vouches for an image, as
// cosign 3's `cosign verify --key KEY --insecure-ignore-tlog=true` decides
// it, with sigstore-js (the Sigstore project's JavaScript implementation):
// an independent check of what `toolhost sign --bundle --key` writes.
//
//   node verify-bundle.mjs --key KEY.pub REGISTRY/REPOSITORY@sha256:…
//
// The bundles are found as cosign finds them: the registry's referrers API
// (GET /v2/REPOSITORY/referrers/DIGEST), else the referrers tag
// `sha256-<hex>` (an OCI image index), over plain HTTP (the test registry is
// on loopback). Each bundle layer is checked against its digest, read by
// @sigstore/bundle, and its DSSE signature verified by @sigstore/verify with
// KEY whatever key hint it carries (cosign ignores the hint too), with no
// transparency log entry, timestamp or certificate required (the key is the
// trust). The signed in-toto statement must be cosign's signature predicate
// whose subject is the image digest: sigstore-js checks the signature, the
// caller what was signed.
//
// Exit 0 and "verified: …" when one bundle verifies; 1 naming each bundle's
// refusal otherwise; 2 on a usage error.

import { createHash, createPublicKey } from 'node:crypto';
import { readFileSync } from 'node:fs';

import { bundleFromJSON } from '@sigstore/bundle';
import { Verifier, toSignedEntity, toTrustMaterial } from '@sigstore/verify';

const BUNDLE_MEDIA_TYPE = 'application/vnd.dev.sigstore.bundle.v0.3+json';
const OCI_INDEX = 'application/vnd.oci.image.index.v1+json';
const OCI_MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
const IN_TOTO_PAYLOAD_TYPE = 'application/vnd.in-toto+json';
const STATEMENT_TYPE = 'https://in-toto.io/Statement/v1';
const SIGN_PREDICATE_TYPE = 'https://sigstore.dev/cosign/sign/v1';

function usage(message) {
  console.error(`verify-bundle: ${message}`);
  console.error('usage: node verify-bundle.mjs --key KEY.pub REGISTRY/REPOSITORY@sha256:…');
  process.exit(2);
}

const [flag, keyPath, image, ...rest] = process.argv.slice(2);
if (flag !== '--key' || !keyPath || !image || rest.length > 0) {
  usage('expected --key KEY.pub and one image');
}
const match = /^([^/]+)\/(.+)@(sha256:[0-9a-f]{64})$/.exec(image);
if (!match) {
  usage(`${image} is not REGISTRY/REPOSITORY@sha256:…`);
}
const [, registry, repository, digest] = match;
const key = createPublicKey(readFileSync(keyPath));
const base = `http://${registry}/v2/${repository}`;

async function get(path, accept) {
  const response = await fetch(`${base}/${path}`, { headers: accept ? { accept } : {} });
  const bytes = Buffer.from(await response.arrayBuffer());
  return { status: response.status, bytes, type: response.headers.get('content-type') ?? '' };
}

function sha256(bytes) {
  return `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
}

// The referrers of the image: through the API, else the referrers tag.
async function referrers() {
  const api = await get(`referrers/${digest}`, OCI_INDEX);
  if (api.status === 200 && api.type.startsWith(OCI_INDEX)) {
    return JSON.parse(api.bytes).manifests ?? [];
  }
  const tag = await get(`manifests/${digest.replace(':', '-')}`, OCI_INDEX);
  if (tag.status === 404) {
    return [];
  }
  if (tag.status !== 200) {
    throw new Error(`the referrers tag: HTTP ${tag.status}`);
  }
  return JSON.parse(tag.bytes).manifests ?? [];
}

// The bundles among the referrers, each checked against its digest.
async function bundles() {
  const found = [];
  for (const entry of await referrers()) {
    const manifest = await get(`manifests/${entry.digest}`, OCI_MANIFEST);
    if (manifest.status !== 200 || sha256(manifest.bytes) !== entry.digest) {
      throw new Error(`referrer ${entry.digest}: HTTP ${manifest.status} or a digest mismatch`);
    }
    const parsed = JSON.parse(manifest.bytes);
    if (parsed.subject?.digest !== digest) {
      continue;
    }
    for (const layer of parsed.layers ?? []) {
      if (layer.mediaType !== BUNDLE_MEDIA_TYPE) {
        continue;
      }
      const blob = await get(`blobs/${layer.digest}`);
      if (blob.status !== 200 || sha256(blob.bytes) !== layer.digest) {
        throw new Error(`bundle ${layer.digest}: HTTP ${blob.status} or a digest mismatch`);
      }
      found.push({ digest: layer.digest, json: JSON.parse(blob.bytes) });
    }
  }
  return found;
}

// The trust: KEY alone, for whatever hint the bundle names; no CA, no
// transparency log, no timestamp authority.
const trust = toTrustMaterial(
  { certificateAuthorities: [], timestampAuthorities: [], tlogs: [], ctlogs: [] },
  () => ({ publicKey: key, validFor: () => true }),
);
const verifier = new Verifier(trust, { tlogThreshold: 0, ctlogThreshold: 0, timestampThreshold: 0 });

// What the verified envelope says it signs must be this image.
function checkStatement(bundle) {
  const envelope = bundle.content.dsseEnvelope;
  if (bundle.content.$case !== 'dsseEnvelope' || envelope.payloadType !== IN_TOTO_PAYLOAD_TYPE) {
    throw new Error('not a DSSE envelope of an in-toto statement');
  }
  const statement = JSON.parse(envelope.payload.toString('utf8'));
  if (statement._type !== STATEMENT_TYPE || statement.predicateType !== SIGN_PREDICATE_TYPE) {
    throw new Error(`statement ${statement._type} of ${statement.predicateType}, not a cosign signature`);
  }
  const subjects = (statement.subject ?? []).map((s) => `sha256:${s.digest?.sha256}`);
  if (!subjects.includes(digest)) {
    throw new Error(`the statement's subject is ${subjects.join(', ')}, not ${digest}`);
  }
}

const refusals = [];
for (const { digest: layer, json } of await bundles()) {
  try {
    const bundle = bundleFromJSON(json);
    if (bundle.verificationMaterial.content.$case !== 'publicKey') {
      throw new Error('not a key-signed bundle');
    }
    verifier.verify(toSignedEntity(bundle));
    checkStatement(bundle);
    console.log(`verified: bundle ${layer} signs ${image} with the key`);
    process.exit(0);
  } catch (error) {
    refusals.push(`bundle ${layer}: ${error.message}`);
  }
}
console.error(`verify-bundle: no bundle by the key vouches for ${image}`);
for (const refusal of refusals) {
  console.error(`  ${refusal}`);
}
process.exit(1);
