// Verify a Trellis webhook delivery (Node.js 18+, no dependencies).
//
//   const { verify } = require("./verify");
//   // with Express: app.post("/hook", express.raw({ type: "application/json" }), (req, res) => …)
//   const ok = verify(secret, req.get("Trellis-Timestamp"), req.get("Trellis-Signature"), req.body);
//
// `rawBody` must be the exact bytes received (a Buffer), before any JSON parsing. Reject
// deliveries whose timestamp is more than `tolerance` seconds from now (replays), and
// deduplicate on the `Trellis-Event-Id` header (deliveries are at least once).
//
// Command line (used by Trellis' own tests):
//   node verify.js SECRET TIMESTAMP SIGNATURE_HEADER BODY_FILE [NOW]
// exits 0 when the signature is valid.
"use strict";
const crypto = require("crypto");

function verify(secret, timestamp, signatureHeader, rawBody, tolerance = 300, now = Date.now() / 1000) {
  const sentAt = Number.parseInt(timestamp, 10);
  if (!Number.isFinite(sentAt) || String(sentAt) !== String(timestamp).trim()) return false;
  if (Math.abs(now - sentAt) > tolerance) return false;
  const expected = Buffer.from(
    "v1=" + crypto.createHmac("sha256", secret).update(`${timestamp}.`).update(rawBody).digest("hex"),
  );
  // During a secret rotation the header carries one entry per valid secret.
  return String(signatureHeader)
    .split(",")
    .map((entry) => Buffer.from(entry.trim()))
    .some((entry) => entry.length === expected.length && crypto.timingSafeEqual(entry, expected));
}

module.exports = { verify };

if (require.main === module) {
  const [secret, timestamp, header, bodyFile, now] = process.argv.slice(2);
  const body = require("fs").readFileSync(bodyFile);
  const ok = verify(secret, timestamp, header, body, 300, now === undefined ? Date.now() / 1000 : Number(now));
  process.exit(ok ? 0 : 1);
}
