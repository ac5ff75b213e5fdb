"""Uses a client generated from /api/openapi.json (openapi-python-client) against the running
binary, as an API consumer would: if the document misdescribes a shape, this fails.

Run by scripts/schemathesis.sh: python check.py BASE_URL API_KEY PEM_FILE
"""
import sys

from trellis_client import AuthenticatedClient
from trellis_client.api.certificates import (
    get_certificate,
    list_certificates,
    register_certificate,
    revoke_certificate,
)
from trellis_client.models import RegisterBody, RevokeBody


def main() -> None:
    base_url, key, pem_file = sys.argv[1:4]
    client = AuthenticatedClient(base_url=base_url, token=key, prefix="", auth_header_name="X-API-Key")
    with open(pem_file) as f:
        pem = f.read()

    created = register_certificate.sync_detailed(client=client, body=RegisterBody(certificate=pem, location="rack 7"))
    assert created.status_code == 201, (created.status_code, created.content)
    certificate = created.parsed.data
    assert certificate.common_name == "client.example.com", certificate
    assert certificate.location == "rack 7", certificate

    fetched = get_certificate.sync(client=client, id=certificate.id)
    assert fetched.data.id == certificate.id and fetched.data.certificate.startswith("-----BEGIN CERTIFICATE-----")

    listed = list_certificates.sync(client=client, search="client.example", limit=10)
    assert listed.total == 1 and listed.data[0].id == certificate.id, listed

    revoked = revoke_certificate.sync(client=client, id=certificate.id, body=RevokeBody(reason="superseded"))
    assert revoked.data.status == "revoked", revoked

    again = revoke_certificate.sync_detailed(client=client, id=certificate.id, body=RevokeBody(reason="again"))
    assert again.status_code == 400, again.status_code
    assert again.parsed.error.code == "VALIDATION_ERROR", again.parsed

    missing = get_certificate.sync_detailed(client=client, id=987654321)
    assert missing.status_code == 404 and missing.parsed.error.code == "NOT_FOUND", missing
    print("generated client: register, get, list, revoke and the error shape work as documented")


if __name__ == "__main__":
    main()
