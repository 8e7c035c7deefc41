//! `racklift media compose` against the media server: the file it writes for a deployment's seed is, byte for
//! byte, what Range reads of that deployment's media return, and its partition 2 starts with a tar whose YAML
//! parses. A seed directory without an install file is refused naming why, and nothing is written.

use std::path::Path;
use std::process::Output;

use racklift_bmc_sim::{Personality, PersonalityChoice};
use racklift_tests::cli::{assert_refused, describe, racklift};
use racklift_tests::rack::Rack;
use serde_json::{Value, json};

/// `racklift media compose --image IMAGE --seed SEED -o OUT`.
async fn compose(image: &str, seed: &Path, out: &Path) -> Output {
    let (seed, out) = (seed.to_str().unwrap(), out.to_str().unwrap());
    racklift(
        &["media", "compose", "--image", image, "--seed", seed, "-o", out],
        &[],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_composed_file_is_what_range_reads_of_the_media_return() {
    // No workers: the deployment stays live, its media served, while it is read.
    let rack = Rack::start_with(1, PersonalityChoice::Single(Personality::Generic), 0.01, false).await;
    let name = rack.sim.name(0).to_owned();
    let accepted = rack.deploy(&name, json!({})).await;
    assert_eq!(accepted.status(), 202);
    let (secret, seed, image): (String, Vec<u8>, String) = sqlx::query_as(
        "SELECT d.media_secret, d.seed_archive, i.path FROM deployments d JOIN images i ON i.id = d.image_id \
         WHERE d.server = $1",
    )
    .bind(&name)
    .fetch_one(&rack.db.pool)
    .await
    .unwrap();

    let dir = std::env::temp_dir().join(format!("racklift-compose-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let (seed_file, out_file) = (dir.join("seed.tar"), dir.join("stick.img"));
    std::fs::write(&seed_file, &seed).unwrap();
    let out = compose(&image, &seed_file, &out_file).await;
    assert!(out.status.success(), "{}", describe(&out));
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let composed = std::fs::read(&out_file).unwrap();
    assert_eq!(printed["size_bytes"], composed.len());
    assert_eq!(printed["sha256"], racklift_store::sha256_hex(&composed));
    assert_ne!(
        composed,
        std::fs::read(&image).unwrap(),
        "the seed is laid over the image"
    );
    // Once more refuses to overwrite.
    assert_refused(&compose(&image, &seed_file, &out_file).await, "stick.img");

    // The media server's bytes, whole and by ranges (a multipart request included).
    let url = format!("{}/media/{secret}/incusos.img", rack.media_url);
    let http = reqwest::Client::new();
    let whole = http.get(&url).send().await.unwrap().bytes().await.unwrap();
    assert!(
        whole == composed,
        "the whole media differs from the composed file"
    );
    let layout = racklift_media::ImageLayout::read(&mut std::io::Cursor::new(&composed)).unwrap();
    let at = layout.seed_offset as usize;
    for (start, end) in [
        (0, 511),
        (at - 100, at + 700),
        (at + 1000, at + 5000),
        (composed.len() - 10, composed.len() - 1),
    ] {
        let r = http
            .get(&url)
            .header("Range", format!("bytes={start}-{end}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 206);
        assert!(
            r.bytes().await.unwrap() == composed[start..=end],
            "bytes {start}-{end}"
        );
    }
    let r = http
        .get(&url)
        .header("Range", format!("bytes=0-99,{at}-{}", at + 99))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 206);
    let body = r.bytes().await.unwrap();
    for part in [&composed[..100], &composed[at..at + 100]] {
        assert!(body.windows(100).any(|w| w == part), "a multipart part differs");
    }

    // Partition 2 of the file starts with the seed's tar, and every YAML file in it parses.
    let files = racklift_media::SeedFiles::from_archive(&composed[at..at + seed.len()]).unwrap();
    assert_eq!(files.provider.name, "operations-center");
    assert!(!files.update.auto_reboot, "only racklift reboots its servers");

    // A seed directory IncusOS would not install from.
    let seed_dir = dir.join("seed");
    std::fs::create_dir_all(&seed_dir).unwrap();
    std::fs::write(seed_dir.join("network.yaml"), "dns: {hostname: n1}\n").unwrap();
    let other = dir.join("other.img");
    let refused = compose(&image, &seed_dir, &other).await;
    assert_refused(&refused, "no install.yaml");
    assert!(!other.exists());
    std::fs::write(seed_dir.join("install.yaml"), "force_reboot: true\n").unwrap();
    let packed = compose(&image, &seed_dir, &other).await;
    assert!(packed.status.success(), "{}", describe(&packed));
    let stick = std::fs::read(&other).unwrap();
    let names: Vec<String> = tar::Archive::new(&stick[at..])
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    assert_eq!(names, ["install.yaml", "network.yaml"]);
    let _ = std::fs::remove_dir_all(&dir);
    rack.stop().await;
}
