//! The Dockerfile's images run what the manifests expect: a `lake` and a `lake-operator` target
//! whose entrypoints are those binaries (the pods give only args: `serve`, `run …`), built from
//! the packages that define them, as the uid the pods run as. (No image is built here: the
//! machine has no container runtime; the node agent runs the same binaries.)

use lake_e2e::workspace_root;

fn stage<'a>(dockerfile: &'a str, target: &str) -> &'a str {
    let header = format!(" AS {target}\n");
    let start = dockerfile
        .find(&header)
        .unwrap_or_else(|| panic!("no `AS {target}` stage"));
    let rest = &dockerfile[start + header.len()..];
    &rest[..rest.find("\nFROM ").unwrap_or(rest.len())]
}

#[test]
fn dockerfile_images_run_the_binaries_the_manifests_expect() {
    let root = workspace_root();
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).unwrap();
    let build = stage(&dockerfile, "build");
    for (target, package, dir, manifest_user) in [
        (
            "lake",
            "lake-runtime",
            "runtime",
            "operator/src/plan/pod.rs",
        ),
        (
            "lake-operator",
            "lake-operator",
            "operator",
            "config/manager/manager.yaml",
        ),
    ] {
        let image = stage(&dockerfile, target);
        assert!(
            image.contains(&format!("ENTRYPOINT [\"/usr/local/bin/{target}\"]")),
            "{target}: {image}"
        );
        assert!(image.contains("USER 65532:65532"), "{target}: {image}");
        assert!(
            build.contains(&format!("-p {package}"))
                && build.contains(&format!("target/release/{target}")),
            "the build stage does not build {target} from {package}: {build}"
        );
        let cargo = std::fs::read_to_string(root.join(dir).join("Cargo.toml")).unwrap();
        assert!(
            cargo.contains(&format!("name = \"{package}\"")),
            "{dir} is not {package}"
        );
        assert!(
            cargo.contains(&format!("name = \"{target}\"")),
            "{package} has no binary {target}"
        );
        let pods = std::fs::read_to_string(root.join(manifest_user)).unwrap();
        assert!(
            pods.contains("65532"),
            "{manifest_user} runs as another uid"
        );
    }
}
