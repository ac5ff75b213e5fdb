"""`python -m trellis_plugin build [PROJECT] [-o OUT.wasm]`: builds a plugin project into a component
with componentize-py (a policy with `--stub-wasi`: it imports only its world's interfaces).

The project's pyproject.toml names the world and the plugin class:

    [tool.trellis-plugin]
    world = "issuance-policy"          # or "integration", "ca-connector"
    plugin = "my_policy:MyPolicy"      # module:class, the module found in the project directory
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from ._guest_names import EXPORT_CLASS

SDK_ROOT = Path(__file__).resolve().parent


def componentize_py(explicit: str | None) -> str:
    candidates = [
        explicit,
        os.environ.get("TRELLIS_COMPONENTIZE_PY"),
        str(Path(sys.executable).parent / "componentize-py"),
        shutil.which("componentize-py"),
        # In the Trellis repository: what scripts/polyglot.sh installs.
        str(SDK_ROOT.parent.parent / "target" / "venv-componentize-py" / "bin" / "componentize-py"),
    ]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    sys.exit("trellis_plugin build: componentize-py not found: `pip install componentize-py==0.25.1` "
             "(in the Trellis repository: scripts/polyglot.sh), or pass --componentize-py PATH")


def build(project: Path, out: Path | None, tool: str | None) -> Path:
    manifest = project / "pyproject.toml"
    try:
        settings = tomllib.loads(manifest.read_text())["tool"]["trellis-plugin"]
        world, plugin = settings["world"], settings["plugin"]
    except (OSError, KeyError, tomllib.TOMLDecodeError) as err:
        sys.exit(f"trellis_plugin build: {manifest} needs [tool.trellis-plugin] world and plugin ({err})")
    if world not in EXPORT_CLASS:
        sys.exit(f"trellis_plugin build: unknown world {world!r}; one of {', '.join(EXPORT_CLASS)}")
    module, _, class_name = plugin.partition(":")
    if not module or not class_name:
        sys.exit(f"trellis_plugin build: plugin = {plugin!r} must be `module:Class`")
    export_class, factory = EXPORT_CLASS[world]
    out = out or project / "target" / f"{project.resolve().name}.wasm"
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="trellis-plugin-") as tmp:
        # componentize-py imports `app` and takes the export class from it by name.
        Path(tmp, "app.py").write_text(
            f"from trellis_plugin._guest import {factory}\n"
            f"from {module} import {class_name}\n"
            f"{export_class} = {factory}({class_name}())\n"
        )
        # `--stub-wasi` replaces every WASI import with a trapping stub, wasi:http included
        # (componentize-py 0.25.1 has no finer switch): only a policy, which has no outbound HTTP,
        # can take it. The others keep wasi:cli/filesystem/sockets imports, which the host
        # satisfies with a context that grants nothing (no preopens, no sockets).
        stub = ["--stub-wasi"] if world == "issuance-policy" else []
        command = [
            componentize_py(tool), "-q", "-d", str(SDK_ROOT / "wit"), "-w", world, "componentize", *stub,
            "-p", tmp, "-p", str(project.resolve()), "-p", str(SDK_ROOT.parent), "app", "-o", str(out),
        ]
        started = time.monotonic()
        result = subprocess.run(command)
        if result.returncode != 0:
            sys.exit(f"trellis_plugin build: componentize-py failed ({result.returncode}): {' '.join(command)}")
    print(f"trellis_plugin build: {out} ({out.stat().st_size} bytes, {time.monotonic() - started:.1f} s)", file=sys.stderr)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m trellis_plugin")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the project into a component")
    b.add_argument("project", nargs="?", default=".", type=Path)
    b.add_argument("-o", "--out", type=Path, help="output file (default PROJECT/target/NAME.wasm)")
    b.add_argument("--componentize-py", dest="tool", help="the componentize-py executable")
    args = parser.parse_args()
    print(build(args.project, args.out, args.tool))


if __name__ == "__main__":
    main()
