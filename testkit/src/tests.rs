//! The test kit's own checks.

use super::*;

#[test]
fn moto_starts_once_per_binary_and_answers() {
    let first = moto();
    let second = moto();
    assert!(std::ptr::eq(first, second), "one server per test binary");
    let response = http(first.port(), "GET", "/moto-api/");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
}

#[test]
fn workspace_root_is_this_clone() {
    let root = workspace_root();
    assert!(
        root.join("scripts/moto_guard.py").exists(),
        "{}",
        root.display()
    );
    let here = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    assert!(
        Path::new(&here).starts_with(&root),
        "{here} is not under {}",
        root.display()
    );
}

#[test]
fn buckets_can_be_created_and_names_are_unique() {
    let bucket = unique("tk");
    assert_ne!(bucket, unique("tk"));
    moto().create_bucket(&bucket);
    let listing = http(moto().port(), "GET", &format!("/{bucket}"));
    assert!(listing.starts_with("HTTP/1.1 200"), "{listing}");
}

#[test]
fn the_control_plane_starts_once_per_binary_and_runs_its_controllers() {
    let plane = control_plane();
    assert!(
        std::ptr::eq(plane, control_plane()),
        "one control plane per test binary"
    );
    let out = plane
        .kubectl()
        .args(["version", "-o", "json"])
        .output()
        .unwrap();
    let version = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{version}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(version.contains("\"gitVersion\": \"v1.37.2\""), "{version}");
    let out = plane
        .kubectl()
        .args(["get", "nodes", "-o", "name"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "node/lake-test-node"
    );
    // The service-account controller (controller manager) made the namespace's account.
    let out = plane
        .kubectl()
        .args([
            "get",
            "serviceaccount",
            "default",
            "-n",
            "kube-system",
            "-o",
            "name",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn missing_tool_fails_with_install_hint() {
    let err = std::panic::catch_unwind(|| venv_tool("no-such-tool-here")).unwrap_err();
    let msg = err.downcast_ref::<String>().unwrap();
    assert!(msg.contains("scripts/bootstrap"), "{msg}");
}

/// `PYTHONOPTIMIZE=1 scripts/test` (or any environment that sets it) would strip every
/// `assert` of the Python peers the tests run, and their checks would pass without checking.
/// The launcher removes it: this test runs the one below in a child of this binary with
/// PYTHONOPTIMIZE set, as `scripts/test` would pass it down.
#[test]
fn python_checks_survive_pythonoptimize() {
    for level in ["1", "2"] {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "tests::python_asserts_under_pythonoptimize",
                "--ignored",
                "--nocapture",
            ])
            .env("PYTHONOPTIMIZE", level)
            .output()
            .unwrap();
        let text = output_text(&out);
        assert!(out.status.success(), "PYTHONOPTIMIZE={level}: {text}");
        assert!(
            text.contains("1 passed"),
            "the child test did not run: {text}"
        );
    }
}

/// Run by [`python_checks_survive_pythonoptimize`] only.
#[test]
#[ignore = "run by python_checks_survive_pythonoptimize with PYTHONOPTIMIZE set"]
fn python_asserts_under_pythonoptimize() {
    assert!(
        std::env::var_os("PYTHONOPTIMIZE").is_some(),
        "the parent sets PYTHONOPTIMIZE"
    );
    let (ok, _, stderr) = python(&["-c", "assert False, 'still checked'"]);
    assert!(
        !ok && stderr.contains("AssertionError: still checked"),
        "{stderr}"
    );
    let (ok, stdout, _) = python(&["-c", "import sys; print(sys.flags.optimize)"]);
    assert!(ok && stdout.trim() == "0", "{stdout}");
    let (ok, _, stderr) = python(&[
        "-c",
        "from lake_checks import ensure; ensure(False, 'raised')",
    ]);
    assert!(!ok && stderr.contains("AssertionError: raised"), "{stderr}");
}

/// The emulator grants a conditional put of one key once, even when its check-then-write is
/// slowed as a loaded machine slows it: without that, two writers could both commit one Lance
/// version and an acknowledged commit was lost (`concurrent_appenders_all_land` saw it once).
#[test]
fn the_emulator_grants_a_conditional_put_once() {
    let guard = workspace_root().join("scripts/moto_guard.py");
    let (ok, out, err) =
        crate::python(&["testkit/python/moto_race.py", &guard.display().to_string()]);
    assert!(ok, "{out}\n{err}");
    let result: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(result["keys"], 20, "{result}");
    assert_eq!(result["several_winners"], 0, "{result}");
}
