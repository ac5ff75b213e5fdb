"""Prepares a moto server for the aws-pca tests (tests/src/moto.rs runs it).

moto enforces IAM only after its first INITIAL_NO_AUTH_ACTION_COUNT requests: the first three
create an administrator and its key, and everything after is signed with that key, so the
server checks every signature and permission from then on. Creates:
- an active ROOT private CA (RSA-2048, SHA256WITHRSA), its certificate self-issued through
  IssueCertificate and imported, as AWS's own setup does;
- `issuer`, allowed acm-pca:* only; `bystander`, allowed nothing; a role `trellis-issuer`
  allowed acm-pca:* that `assumer` (allowed sts:AssumeRole only) may assume.
Prints one JSON object with the ARNs, keys and the root's PEM.

Usage: setup_pca.py ENDPOINT REGION
"""

import json
import sys

import boto3

endpoint, region = sys.argv[1], sys.argv[2]


def client(service, key=None):
    credentials = key or {"AccessKeyId": "bootstrap", "SecretAccessKey": "bootstrap"}
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
    )


def allow(actions):
    return json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}]})


# The three unauthenticated requests.
iam = client("iam")
iam.create_user(UserName="admin")
iam.put_user_policy(UserName="admin", PolicyName="all", PolicyDocument=allow(["iam:*", "sts:*", "acm-pca:*"]))
admin_key = iam.create_access_key(UserName="admin")["AccessKey"]

iam = client("iam", admin_key)
keys = {}
for user, actions in {"issuer": ["acm-pca:*"], "bystander": [], "assumer": ["sts:AssumeRole"]}.items():
    created = iam.create_user(UserName=user)["User"]
    if actions:
        iam.put_user_policy(UserName=user, PolicyName="p", PolicyDocument=allow(actions))
    keys[user] = dict(iam.create_access_key(UserName=user)["AccessKey"], Arn=created["Arn"])

trust = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"AWS": keys["assumer"]["Arn"]}, "Action": "sts:AssumeRole"}],
}
role = iam.create_role(RoleName="trellis-issuer", AssumeRolePolicyDocument=json.dumps(trust))["Role"]
iam.put_role_policy(RoleName="trellis-issuer", PolicyName="p", PolicyDocument=allow(["acm-pca:*"]))

pca = client("acm-pca", admin_key)
ca_arn = pca.create_certificate_authority(
    CertificateAuthorityConfiguration={
        "KeyAlgorithm": "RSA_2048",
        "SigningAlgorithm": "SHA256WITHRSA",
        "Subject": {"Organization": "Trellis Tests", "CommonName": "Moto Private Root"},
    },
    CertificateAuthorityType="ROOT",
)["CertificateAuthorityArn"]
csr = pca.get_certificate_authority_csr(CertificateAuthorityArn=ca_arn)["Csr"]
root_arn = pca.issue_certificate(
    CertificateAuthorityArn=ca_arn,
    Csr=csr.encode(),
    SigningAlgorithm="SHA256WITHRSA",
    TemplateArn="arn:aws:acm-pca:::template/RootCACertificate/V1",
    Validity={"Value": 3650, "Type": "DAYS"},
)["CertificateArn"]
root_pem = pca.get_certificate(CertificateAuthorityArn=ca_arn, CertificateArn=root_arn)["Certificate"]
pca.import_certificate_authority_certificate(CertificateAuthorityArn=ca_arn, Certificate=root_pem.encode())

# A second CA that never gets its certificate: PENDING_CERTIFICATE, as a half-made CA is.
pending_arn = pca.create_certificate_authority(
    CertificateAuthorityConfiguration={
        "KeyAlgorithm": "RSA_2048",
        "SigningAlgorithm": "SHA256WITHRSA",
        "Subject": {"CommonName": "Moto Pending CA"},
    },
    CertificateAuthorityType="SUBORDINATE",
)["CertificateAuthorityArn"]


def key_of(user):
    return {"accessKeyId": keys[user]["AccessKeyId"], "secretAccessKey": keys[user]["SecretAccessKey"]}


print(
    json.dumps(
        {
            "caArn": ca_arn,
            "pendingCaArn": pending_arn,
            "rootPem": root_pem,
            "issuer": key_of("issuer"),
            "bystander": key_of("bystander"),
            "assumer": key_of("assumer"),
            "roleArn": role["Arn"],
        }
    )
)
