//! racklift.toml's `[paths] images_dir`: a catalog image is a regular file inside it (opened beneath it; links
//! that leave it refused), given absolute or relative to it, refused with a 422 naming `path` otherwise; and the
//! media server opens it again at every request, so a file swapped for a link out of the directory is not served.
//! racklift records the SHA-256 it computes itself, and a file rewritten since is hashed again before it is
//! served. No answer names a host path. The confinement of
//! BMC password references is in `secret_confinement.rs`.

mod common;

use common::{ADMIN, Api, OPERATOR, code, field};
use racklift_bmc_sim::{Personality, PersonalityChoice, Sim, SimConfig};
use reqwest::Method;
use serde_json::json;

fn image(path: &str, channel: &str) -> serde_json::Value {
    json!({ "type": "iso", "architecture": "x86_64", "channel": channel, "path": path,
            "size_bytes": common::IMAGE_MIN })
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
        no_host_path(&api, &v);
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
        assert_eq!(
            v["path"].as_str(),
            canonical.to_str(),
            "stored under the directory: {v}"
        );
    }
    api.stop().await;
}

/// An answer names no directory of the host: neither the images directory nor where the test keeps it.
fn no_host_path(api: &Api, answer: &serde_json::Value) {
    let text = answer.to_string();
    for dir in [api.dirs.images(), api.dirs.base.clone()] {
        let canonical = std::fs::canonicalize(&dir).unwrap_or(dir.clone());
        for shown in [dir.display().to_string(), canonical.display().to_string()] {
            assert!(!text.contains(&shown), "the answer names {shown}: {text}");
        }
    }
}

#[tokio::test]
async fn an_image_is_recorded_with_the_digest_racklift_computes() {
    let api = Api::start().await;
    let path = api.dirs.images().join("incusos.img");
    std::fs::rename(api.seedable_image(common::IMAGE_MIN), &path).unwrap();
    let digest = racklift_store::sha256_hex(&std::fs::read(&path).unwrap());
    let with = |sha256: &str, channel: &str| {
        let mut body = image("incusos.img", channel);
        body["sha256"] = json!(sha256);
        body
    };

    // A digest that is not the file's is refused, naming the field, and nothing is registered.
    let (s, v) = api
        .call(
            Method::POST,
            "/1.0/images",
            ADMIN,
            Some(with(&"0".repeat(64), "stable")),
        )
        .await;
    assert_eq!(
        (s, code(&v), field(&v)),
        (422, "sha256_mismatch", Some("sha256")),
        "{v}"
    );
    no_host_path(&api, &v);
    let (_, listed) = api.call(Method::GET, "/1.0/images", ADMIN, None).await;
    assert_eq!(listed, json!([]), "nothing registered");

    // Without one, racklift's own is recorded; with the right one, the same.
    let (s, v) = api
        .call(
            Method::POST,
            "/1.0/images",
            ADMIN,
            Some(image("incusos.img", "stable")),
        )
        .await;
    assert_eq!((s, v["sha256"].as_str()), (201, Some(digest.as_str())), "{v}");
    let (s, v) = api
        .call(Method::POST, "/1.0/images", ADMIN, Some(with(&digest, "testing")))
        .await;
    assert_eq!((s, v["sha256"].as_str()), (201, Some(digest.as_str())), "{v}");
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

#[tokio::test]
async fn an_image_rewritten_in_place_is_not_served_with_its_old_digest() {
    let api = Api::start().await;
    let sim =
        Sim::start(SimConfig::new(1, PersonalityChoice::Single(Personality::Generic)).with_time_scale(0.001))
            .await
            .expect("simulator");
    let (token, path) = common::catalog(&api, &sim, 4096).await;
    let path = std::path::PathBuf::from(path);
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
    let get = || async { common::read(api.req(Method::GET, &url, None).send().await.unwrap()).await };
    let (s, _) = get().await;
    assert_eq!(s, 200);

    // The same size, other bytes: refused with the image's catalog id, not its path.
    let original = std::fs::read(&path).unwrap();
    let mut changed = original.clone();
    let last = changed.len() - 1;
    changed[last] ^= 0xff;
    common::rewrite_in_place(&path, &changed);
    let (s, v) = get().await;
    assert_eq!((s, code(&v)), (503, "image_changed"), "{v}");
    no_host_path(&api, &v);
    let (s, v) = get().await;
    assert_eq!((s, code(&v)), (503, "image_changed"), "refused again: {v}");

    // Its registered bytes back (another stamp still): hashed again, the same digest, served.
    common::rewrite_in_place(&path, &original);
    let (s, _) = get().await;
    assert_eq!(s, 200);
    api.stop().await;
    sim.shutdown().await;
}
