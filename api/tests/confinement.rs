//! racklift.toml's `[paths] images_dir`: a catalog image is a regular file inside it (symbolic links resolved),
//! given absolute or relative to it, refused with a 422 naming `path` otherwise; and the media server checks it
//! again at every request, so a file swapped for a link out of the directory is not served. The confinement of
//! BMC password references is in `secret_confinement.rs`.

mod common;

use common::{ADMIN, Api, OPERATOR, code, field};
use racklift_bmc_sim::{Personality, PersonalityChoice, Sim, SimConfig};
use reqwest::Method;
use serde_json::json;

fn image(path: &str, channel: &str) -> serde_json::Value {
    json!({ "type": "iso", "architecture": "x86_64", "channel": channel, "path": path,
            "size_bytes": common::IMAGE_MIN, "sha256": "0".repeat(64) })
}

fn mkfifo(path: &std::path::Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

#[tokio::test]
async fn images_stay_inside_their_directory() {
    let api = Api::start().await;
    let images = api.dirs.images();
    let elsewhere = api.dirs.base.join("elsewhere");
    let good = api.seedable_image(common::IMAGE_MIN);
    std::fs::copy(&good, &elsewhere).unwrap();
    std::fs::rename(&good, images.join("incusos.img")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, images.join("link.img")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", images.join("passwd.img")).unwrap();
    mkfifo(&images.join("fifo.img"));
    std::fs::create_dir_all(images.join("a-directory")).unwrap();
    let inside = |name: &str| images.join(name).display().to_string();

    for (path, why) in [
        (elsewhere.display().to_string(), "a file outside"),
        ("/etc/shadow".to_owned(), "a host file"),
        (inside("link.img"), "a link pointing outside"),
        ("passwd.img".to_owned(), "a relative link pointing outside"),
        ("../elsewhere".to_owned(), "a relative path climbing out"),
        (inside("missing.img"), "a file that does not exist"),
        (inside("fifo.img"), "a FIFO"),
        (inside("a-directory"), "a directory"),
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
    let canonical = std::fs::canonicalize(images.join("incusos.img")).unwrap();
    for (path, channel) in [
        (inside("incusos.img"), "stable"),
        ("incusos.img".to_owned(), "testing"),
    ] {
        let (s, v) = api
            .call(Method::POST, "/1.0/images", ADMIN, Some(image(&path, channel)))
            .await;
        assert_eq!(s, 201, "{path}: {v}");
        assert_eq!(v["path"].as_str(), canonical.to_str(), "stored resolved: {v}");
    }
    api.stop().await;
}

#[tokio::test]
async fn the_media_server_checks_the_file_again_at_every_request() {
    let api = Api::start().await;
    let sim =
        Sim::start(SimConfig::new(1, PersonalityChoice::Single(Personality::Generic)).with_time_scale(0.001))
            .await
            .expect("simulator");
    let (token, path) = common::catalog(&api, &sim, 4096).await;
    common::set_public_address(&api).await;
    let r = api
        .req(
            Method::POST,
            "/1.0/provisioning/servers/node1:deploy",
            Some(OPERATOR),
        )
        .json(&json!({ "token": token, "seed": "web" }));
    let (s, d) = common::read(r.send().await.unwrap()).await;
    assert_eq!(s, 202, "{d}");
    let secret: String = sqlx::query_scalar("SELECT media_secret FROM deployments WHERE id = $1")
        .bind(d["id"].as_i64().unwrap())
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    let url = format!("/media/{secret}/incusos.img");
    let status = || async {
        api.req(Method::GET, &url, None)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(status().await, 200);

    let outside = api.dirs.base.join("outside.img");
    std::fs::write(&outside, vec![7u8; 4096]).unwrap();
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink(&outside, &path).unwrap();
    assert_eq!(
        status().await,
        404,
        "a link out of the images directory is served"
    );
    std::fs::remove_file(&path).unwrap();
    mkfifo(std::path::Path::new(&path));
    assert_eq!(status().await, 404, "a FIFO is served");
    api.stop().await;
    sim.shutdown().await;
}
