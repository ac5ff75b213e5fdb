"""The export class componentize-py looks for per world, and the `_guest` factory that makes it."""

EXPORT_CLASS = {
    "issuance-policy": ("Policy", "policy_export"),
    "integration": ("Notifier", "notifier_export"),
    "ca-connector": ("Connector", "connector_export"),
}
