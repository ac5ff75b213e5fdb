"""A template issuance policy: deny names under `deniedSuffix`, cap the validity at `maxDays`."""

from typing import Any

from trellis_plugin import Allow, CallContext, Decision, Deny, EvaluationRequest, IssuancePolicy, PluginInfo, Reason


class MyPolicy(IssuancePolicy):
    def info(self) -> PluginInfo:
        return PluginInfo(
            id="com.example.my-policy",  # reverse-DNS, 3 to 64 characters
            version="0.1.0",
            name="My policy",
            serves=["my-policy"],  # the policy type operators bind
            description="Denies names under one suffix and caps the validity.",
            # The SDK checks configurations against this before validate_config/evaluate run.
            config_schema={
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "deniedSuffix": {"type": "string"},
                    "maxDays": {"type": "integer", "minimum": 1},
                },
            },
        )

    def evaluate(self, ctx: CallContext, config: dict[str, Any], request: EvaluationRequest) -> Decision:
        suffix = config.get("deniedSuffix")
        if suffix:
            bad = [name for name in request.dns_names() if name.endswith(suffix)]
            if bad:
                return Deny([Reason("name-denied", f"{name} is under {suffix}") for name in bad])
        max_days = config.get("maxDays")
        if max_days and request.validity_days > max_days:
            return Allow(max_days)
        return Allow()
