//! The README's "First steps" run as written (issue 21): `scripts/readme-walkthrough.sh` reads
//! the block from README.md and runs it against the binary under test, checking every step's
//! HTTP status and that the issued certificate verifies against `/pki/{caId}/ca`.

use std::process::Command;

use trellis_tests::{trellis_binary, workspace_root};

#[test]
fn the_readme_first_steps_run_as_written() {
    let script = workspace_root().join("scripts/readme-walkthrough.sh");
    let output = Command::new("bash")
        .arg(&script)
        .arg(trellis_binary())
        .output()
        .unwrap_or_else(|err| panic!("running {}: {err}", script.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the README walkthrough failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("the issued certificate verifies"), "{stdout}\n{stderr}");
}
