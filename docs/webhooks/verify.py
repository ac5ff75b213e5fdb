"""Verify a Trellis webhook delivery (Python 3, standard library only).

    from verify import verify
    ok = verify(secret, request.headers["Trellis-Timestamp"],
                request.headers["Trellis-Signature"], raw_body)

`raw_body` must be the exact bytes received, before any JSON parsing. Reject deliveries
whose timestamp is more than `tolerance` seconds away from now (replays), and deduplicate
on the `Trellis-Event-Id` header (deliveries are at least once).

Command line (used by Trellis' own tests):
    python3 verify.py SECRET TIMESTAMP SIGNATURE_HEADER BODY_FILE [NOW]
exits 0 when the signature is valid.
"""
import hashlib
import hmac
import sys
import time


def verify(secret: str, timestamp: str, signature_header: str, raw_body: bytes,
           tolerance: int = 300, now: float = None) -> bool:
    try:
        sent_at = int(timestamp)
    except (TypeError, ValueError):
        return False
    now = time.time() if now is None else now
    if abs(now - sent_at) > tolerance:
        return False
    signed = timestamp.encode() + b"." + raw_body
    expected = "v1=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    # During a secret rotation the header carries one entry per valid secret.
    return any(hmac.compare_digest(entry.strip(), expected)
               for entry in signature_header.split(","))


if __name__ == "__main__":
    secret, timestamp, header, body_file = sys.argv[1:5]
    now = float(sys.argv[5]) if len(sys.argv) > 5 else None
    with open(body_file, "rb") as f:
        body = f.read()
    sys.exit(0 if verify(secret, timestamp, header, body, now=now) else 1)
