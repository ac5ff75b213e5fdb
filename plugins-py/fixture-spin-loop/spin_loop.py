"""Test fixture (crates/plugin-host/src/tests/languages.rs): an issuance policy in Python whose
`evaluate` loops forever when the configuration has `"spin": true`, and allows otherwise. The host
must stop the loop at the policy kind's CPU budget (epoch interruption inside CPython's own
interpreter loop) and keep serving other plugins."""

from typing import Any

from trellis_plugin import Allow, CallContext, Decision, EvaluationRequest, IssuancePolicy, PluginInfo


class SpinLoop(IssuancePolicy):
    def info(self) -> PluginInfo:
        return PluginInfo(
            id="trellis.fixture.spin-loop-py",
            version="0.1.0",
            name="Spin loop (Python fixture)",
            serves=["fixture-spin-loop-py"],
            description="Never returns from evaluate when configured to spin.",
            config_schema={
                "type": "object",
                "additionalProperties": False,
                "properties": {"spin": {"type": "boolean"}},
            },
        )

    def evaluate(self, ctx: CallContext, config: dict[str, Any], request: EvaluationRequest) -> Decision:
        count = 0
        while config.get("spin"):
            # Pure interpreter work, no host call: only the CPU budget can end it.
            count += 1
        return Allow()
