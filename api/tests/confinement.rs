//! racklift.toml's `[paths] secrets_dir` and `images_dir`: once set, a BMC's `file:` password reference and a
//! catalog image must point inside them (symbolic links resolved), refused with a 422 naming the field otherwise.

mod common;

use common::{ADMIN, Api, code, field};
use racklift_api::ApiConfig;
use racklift_workers::bmc_access::AccessPolicy;
use reqwest::Method;
use serde_json::json;

struct Dirs {
    base: std::path::PathBuf,
}

impl Drop for Dirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

#[tokio::test]
async fn references_and_images_stay_inside_their_directories() {
    let dirs = Dirs {
        base: std::env::temp_dir().join(format!("racklift-confine-{}", uuid::Uuid::new_v4())),
    };
    let (secrets, images) = (dirs.base.join("secrets"), dirs.base.join("images"));
    std::fs::create_dir_all(&secrets).unwrap();
    std::fs::create_dir_all(&images).unwrap();
    std::fs::write(secrets.join("bmc"), "pw").unwrap();
    std::fs::write(dirs.base.join("elsewhere"), "pw").unwrap();
    std::fs::write(images.join("incusos.img"), vec![0u8; 4096]).unwrap();
    std::os::unix::fs::symlink(dirs.base.join("elsewhere"), images.join("link.img")).unwrap();
    let api = Api::start_with(ApiConfig {
        bmc_access: AccessPolicy::load(None, Some(&secrets)).unwrap(),
        images_dir: Some(images.clone()),
        ..ApiConfig::default()
    })
    .await;

    let server = |name: &str, reference: String| {
        json!({ "name": name, "bmc_address": "https://10.0.0.9", "bmc_username": "root",
                "bmc_password_ref": reference })
    };
    let outside = format!("file:{}", dirs.base.join("elsewhere").display());
    let (s, v) = api
        .call(Method::POST, "/1.0/servers", ADMIN, Some(server("c1", outside)))
        .await;
    assert_eq!(
        (s, code(&v), field(&v)),
        (422, "outside_secrets_dir", Some("bmc_password_ref")),
        "{v}"
    );
    let dotdot = format!("file:{}/../elsewhere", secrets.display());
    let (s, v) = api
        .call(Method::POST, "/1.0/servers", ADMIN, Some(server("c1", dotdot)))
        .await;
    assert_eq!((s, field(&v)), (422, Some("bmc_password_ref")), "{v}");
    let inside = format!("file:{}", secrets.join("bmc").display());
    let (s, v) = api
        .call(Method::POST, "/1.0/servers", ADMIN, Some(server("c1", inside)))
        .await;
    assert_eq!(s, 201, "{v}");
    // Environment references are not files: the directory does not apply to them.
    let (s, v) = api
        .call(
            Method::POST,
            "/1.0/servers",
            ADMIN,
            Some(server("c2", "env:C2_PASSWORD".into())),
        )
        .await;
    assert_eq!(s, 201, "{v}");

    let image = |path: &std::path::Path, channel: &str| {
        json!({ "type": "iso", "architecture": "x86_64", "channel": channel, "path": path,
                "size_bytes": 4096, "sha256": "0".repeat(64) })
    };
    for (path, why) in [
        (dirs.base.join("elsewhere"), "a file outside"),
        (images.join("link.img"), "a link pointing outside"),
        (images.join("missing.img"), "a file that does not exist"),
    ] {
        let (s, v) = api
            .call(Method::POST, "/1.0/images", ADMIN, Some(image(&path, "stable")))
            .await;
        assert_eq!(
            (s, code(&v), field(&v)),
            (422, "outside_images_dir", Some("path")),
            "{why}: {v}"
        );
    }
    let (s, v) = api
        .call(
            Method::POST,
            "/1.0/images",
            ADMIN,
            Some(image(&images.join("incusos.img"), "stable")),
        )
        .await;
    assert_eq!(s, 201, "{v}");
}
