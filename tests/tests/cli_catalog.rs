//! The catalog and server verbs of `racklift` as an operator runs them: the built binary as a child process
//! against a rack whose API runs in this test process. Servers are added and removed, images registered with
//! the size and checksum the CLI reads from the file, provisioning tokens, seeds, BIOS profiles and the
//! public address set and read back. The bulk forms are in `cli_bulk.rs`.

use std::path::{Path, PathBuf};

use racklift_bmc_sim::{Personality, PersonalityChoice};
use racklift_tests::cli::{as_admin as admin, assert_refused, describe, json_out, stderr, stdout};
use racklift_tests::rack::Rack;
use serde_json::Value;

/// A scratch directory for the files the commands read.
fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("racklift-cli-catalog-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn write(dir: &Path, name: &str, contents: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, contents).expect("write a scratch file");
    path.display().to_string()
}

/// `racklift` arguments written as one line, for the ones without spaces inside an argument.
fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn servers_are_added_shown_and_removed() {
    let rack = Rack::start_with(1, PersonalityChoice::Single(Personality::Generic), 0.01, false).await;

    let out = admin(
        &rack,
        &words(concat!(
            "server add added-1 --bmc-address https://10.0.0.5 --bmc-username root ",
            "--bmc-password-ref env:RACKLIFT_SECRET_ADDED_1 --vendor-hint dell",
        )),
    )
    .await;
    assert!(out.status.success(), "{}", describe(&out));
    let shown = stdout(&out);
    for line in ["name:", "status:", "bmc password:"] {
        assert!(
            shown.lines().any(|l| l.starts_with(line)),
            "{line}\n{}",
            describe(&out)
        );
    }
    assert!(
        shown.contains("added-1") && shown.contains("unregistered"),
        "{}",
        describe(&out)
    );

    // The reference is reduced to "set" in every answer; the CLI sends it but never shows it back.
    let listed = json_out(&admin(&rack, &["server", "list", "--json"]).await);
    let added = listed
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == "added-1"))
        .unwrap_or_else(|| panic!("added-1 not listed: {listed}"));
    assert_eq!(added["vendor_hint"], "dell");
    assert_eq!(added["bmc_password_ref"], "set");
    assert_eq!(added["bmc_address"], "https://10.0.0.5");

    let out = admin(&rack, &["server", "show", "added-1"]).await;
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l.starts_with("deployment:") && l.ends_with("none"))
    );

    // An existing name is the API's conflict, in one line.
    let out = admin(
        &rack,
        &words(concat!(
            "server add added-1 --bmc-address https://10.0.0.6 --bmc-username root ",
            "--bmc-password-ref file:rack-a/pw",
        )),
    )
    .await;
    assert_refused(&out, "server_exists");
    assert_eq!(stderr(&out).trim().lines().count(), 1, "{}", describe(&out));

    // A password where a reference belongs never leaves the machine.
    let out = admin(
        &rack,
        &words(concat!(
            "server add added-2 --bmc-address https://10.0.0.7 --bmc-username root ",
            "--bmc-password-ref hunter2",
        )),
    )
    .await;
    assert_refused(&out, "env:NAME or file:NAME");
    // So does a path on the operator's or the API's host: a file reference is a name in the secrets directory.
    let out = admin(
        &rack,
        &words(concat!(
            "server add added-2 --bmc-address https://10.0.0.7 --bmc-username root ",
            "--bmc-password-ref file:/etc/passwd",
        )),
    )
    .await;
    assert_refused(&out, "relative to the secrets directory");
    // A variable without the API's secret prefix is the API's refusal.
    let out = admin(
        &rack,
        &words(concat!(
            "server add added-2 --bmc-address https://10.0.0.7 --bmc-username root ",
            "--bmc-password-ref env:HOME",
        )),
    )
    .await;
    assert_refused(&out, "bad_password_ref");

    // A plain-http BMC is added only when the operator says so.
    let out = admin(
        &rack,
        &words(concat!(
            "server add plain-1 --bmc-address http://10.0.0.8 --bmc-username root ",
            "--bmc-password-ref env:RACKLIFT_SECRET_PLAIN_1",
        )),
    )
    .await;
    assert_refused(&out, "plain_http_bmc");
    let out = admin(
        &rack,
        &words(concat!(
            "server add plain-1 --bmc-address http://10.0.0.8 --bmc-username root ",
            "--bmc-password-ref env:RACKLIFT_SECRET_PLAIN_1 --allow-plain-http --json",
        )),
    )
    .await;
    assert_eq!(json_out(&out)["bmc_address"], "http://10.0.0.8");

    let out = admin(&rack, &["server", "remove", "added-1"]).await;
    assert!(out.status.success(), "{}", describe(&out));
    assert!(stdout(&out).contains("added-1: removed"), "{}", describe(&out));
    let out = admin(&rack, &["server", "remove", "plain-1", "--json"]).await;
    assert_eq!(json_out(&out), Value::Null);
    let listed = json_out(&admin(&rack, &["server", "list", "--json"]).await);
    assert_eq!(names(&listed), vec![rack.sim.name(0).to_owned()]);
    assert_refused(
        &admin(&rack, &["server", "show", "added-1"]).await,
        "server_not_found",
    );
    assert_refused(
        &admin(&rack, &["server", "remove", "added-1"]).await,
        "server_not_found",
    );
    rack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_catalog_is_kept_from_the_terminal() {
    let rack = Rack::start_with(1, PersonalityChoice::Single(Personality::Generic), 0.01, false).await;
    let dir = scratch();

    // Images: the size and checksum come from the file, which must be in the API's images directory.
    let (image, sha256) =
        racklift_api::demo::generate_image(&rack.images_dir().join("cli"), 3 * 1024 * 1024 + 17)
            .expect("image file");
    // The path as the API records it: absolute with no symbolic links, as the CLI sends it.
    let image = std::fs::canonicalize(image)
        .expect("the image path")
        .display()
        .to_string();
    let add = [
        "image",
        "add",
        "--type",
        "iso",
        "--architecture",
        "aarch64",
        "--channel",
        "testing",
        "--path",
        &image,
    ];
    let out = admin(&rack, &add).await;
    assert!(out.status.success(), "{}", describe(&out));
    assert!(stdout(&out).contains(&sha256), "{}", describe(&out));
    let images = json_out(&admin(&rack, &["image", "list", "--json"]).await);
    let registered = images
        .as_array()
        .and_then(|a| a.iter().find(|i| i["architecture"] == "aarch64"))
        .unwrap_or_else(|| panic!("the image is not listed: {images}"));
    assert_eq!(registered["size_bytes"], 3 * 1024 * 1024 + 17);
    assert_eq!(registered["sha256"], sha256.as_str());
    assert_eq!(registered["path"], image.as_str());
    let out = admin(&rack, &["image", "list"]).await;
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        stdout(&out).starts_with("ID") && stdout(&out).contains("aarch64"),
        "{}",
        describe(&out)
    );
    // The same type, architecture and channel again is the API's conflict.
    assert_refused(&admin(&rack, &add).await, "image_exists");

    // A checksum that is not the file's is refused before anything is registered; one that is no checksum at
    // all is refused by the argument parser.
    let wrong = "0".repeat(64);
    let mut checked = add.to_vec();
    checked[7] = "checked";
    checked.extend(["--sha256", &wrong]);
    assert_refused(&admin(&rack, &checked).await, "not the --sha256 given");
    let upper = sha256.to_ascii_uppercase();
    checked.truncate(10);
    checked.extend(["--sha256", "abc"]);
    assert_refused(&admin(&rack, &checked).await, "64 hex digits");
    checked.truncate(10);
    checked.extend(["--sha256", &upper, "--json"]);
    let out = admin(&rack, &checked).await;
    assert_eq!(json_out(&out)["sha256"], sha256.as_str());
    let images = json_out(&admin(&rack, &["image", "list", "--json"]).await);
    let channels: Vec<&str> = images
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["architecture"] == "aarch64")
        .filter_map(|i| i["channel"].as_str())
        .collect();
    assert_eq!(channels, ["testing", "checked"], "{images}");

    // Provisioning tokens.
    let before = chrono::Utc::now();
    let out = admin(
        &rack,
        &[
            "provisioning-token",
            "create",
            "--description",
            "rack 7",
            "--uses",
            "3",
            "--expires-in",
            "2d",
            "--json",
        ],
    )
    .await;
    let created = json_out(&out);
    let token = created["token"].as_str().expect("a token").to_owned();
    assert_eq!(created["uses_remaining"], 3);
    assert_eq!(created["description"], "rack 7");
    let expires: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(created["expires_at"].clone()).expect("expires_at");
    let two_days = chrono::TimeDelta::days(2);
    assert!(
        expires >= before + two_days && expires <= chrono::Utc::now() + two_days,
        "{created}"
    );
    let out = admin(&rack, &["provisioning-token", "list"]).await;
    assert!(out.status.success(), "{}", describe(&out));
    let table = stdout(&out);
    assert!(table.starts_with("TOKEN"), "{}", describe(&out));
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(&token) && l.contains("rack 7")),
        "{}",
        describe(&out)
    );
    let out = admin(&rack, &["provisioning-token", "create"]).await;
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        stdout(&out).lines().any(|l| l.starts_with("token:")),
        "{}",
        describe(&out)
    );
    let tokens = json_out(&admin(&rack, &["provisioning-token", "list", "--json"]).await);
    // The demo catalog's, the one above and the one with the defaults.
    assert_eq!(tokens.as_array().map(Vec::len), Some(3), "{tokens}");
    assert_refused(
        &admin(&rack, &["provisioning-token", "create", "--expires-in", "soon"]).await,
        "--expires-in",
    );

    // Seeds.
    let config = write(&dir, "install.json", r#"{"target": {"bus": "NVME"}}"#);
    let out = admin(
        &rack,
        &[
            "seed",
            "set",
            &token,
            "web",
            "--public",
            "--force-reboot",
            "--install-config-file",
            &config,
        ],
    )
    .await;
    assert!(out.status.success(), "{}", describe(&out));
    assert!(stdout(&out).contains("force_reboot"), "{}", describe(&out));
    let out = admin(&rack, &["seed", "set", &token, "private"]).await;
    assert!(out.status.success(), "{}", describe(&out));
    let seeds = json_out(&admin(&rack, &["seed", "list", &token, "--json"]).await);
    let web = seeds
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == "web"))
        .unwrap_or_else(|| panic!("no web seed: {seeds}"));
    assert_eq!(web["public"], true);
    assert_eq!(web["install_config"]["force_reboot"], true);
    assert_eq!(web["install_config"]["target"]["bus"], "NVME");
    let out = admin(&rack, &["seed", "list", &token]).await;
    assert!(out.status.success(), "{}", describe(&out));
    let table = stdout(&out);
    assert!(table.starts_with("NAME"), "{}", describe(&out));
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().take(3).eq(["private", "false", "false"])),
        "{}",
        describe(&out)
    );
    assert_refused(
        &admin(&rack, &["seed", "set", &token, "web"]).await,
        "seed_exists",
    );
    assert_refused(&admin(&rack, &["seed", "list", "not-a-uuid"]).await, "not a UUID");
    let not_json = write(&dir, "broken.json", "{");
    assert_refused(
        &admin(
            &rack,
            &["seed", "set", &token, "other", "--install-config-file", &not_json],
        )
        .await,
        "is not JSON",
    );

    // BIOS profiles: a document from a file with the flags on top.
    let profile = write(
        &dir,
        "profile.json",
        r#"{"attributes": {"Cores": 8}, "secure_boot": {"db": []}}"#,
    );
    let out = admin(
        &rack,
        &[
            "bios-profile",
            "set",
            "dell-base",
            "--file",
            &profile,
            "--priority",
            "5",
            "--match-vendor",
            "dell",
            "--match-manufacturer",
            "Dell Inc.",
            "--match-model",
            "PowerEdge R7",
            "--match-sku",
            "F54P1G3",
            "--match-attribute-registry",
            "BiosAttributeRegistry",
            "--attribute",
            "BootMode=Uefi",
            "--deferred-attribute",
            "SriovGlobalEnable=Enabled",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", describe(&out));
    assert!(stdout(&out).contains("vendor=dell"), "{}", describe(&out));
    let profiles = json_out(&admin(&rack, &["bios-profile", "list", "--json"]).await);
    let dell = profiles
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == "dell-base"))
        .unwrap_or_else(|| panic!("no dell-base profile: {profiles}"));
    assert_eq!(dell["priority"], 5);
    assert_eq!(
        dell["match_rules"],
        serde_json::json!({ "vendor": "dell", "manufacturer": "Dell Inc.", "model": "PowerEdge R7",
                            "sku": "F54P1G3", "attribute_registry": "BiosAttributeRegistry" })
    );
    assert_eq!(dell["attributes"]["Cores"], 8);
    assert_eq!(dell["attributes"]["BootMode"], "Uefi");
    assert_eq!(dell["deferred_attributes"]["SriovGlobalEnable"], "Enabled");
    let out = admin(&rack, &["bios-profile", "list"]).await;
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l.starts_with("dell-base") && l.contains("vendor=dell")),
        "{}",
        describe(&out)
    );
    // The API's own checks come back as its messages.
    let bad = write(&dir, "bad.json", r#"{"match_rules": {"colour": "red"}}"#);
    assert_refused(
        &admin(&rack, &["bios-profile", "set", "bad", "--file", &bad]).await,
        "match_rules.colour",
    );
    assert_refused(
        &admin(&rack, &["bios-profile", "set", "bad", "--match-sku", " "]).await,
        "match_rules.sku",
    );
    let out = admin(&rack, &["bios-profile", "remove", "dell-base"]).await;
    assert!(out.status.success(), "{}", describe(&out));
    let profiles = json_out(&admin(&rack, &["bios-profile", "list", "--json"]).await);
    assert!(!names(&profiles).contains(&"dell-base".to_owned()), "{profiles}");
    assert_refused(
        &admin(&rack, &["bios-profile", "remove", "dell-base"]).await,
        "bios_profile_not_found",
    );

    // The public address.
    let out = admin(&rack, &["settings", "public-address"]).await;
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        stdout(&out).trim(),
        format!("public address: {}", rack.api_url),
        "{}",
        describe(&out)
    );
    let out = admin(
        &rack,
        &["settings", "public-address", "https://racklift.example:7878/"],
    )
    .await;
    assert!(out.status.success(), "{}", describe(&out));
    let shown = json_out(&admin(&rack, &["settings", "public-address", "--json"]).await);
    assert_eq!(shown["address"], "https://racklift.example:7878");
    assert_refused(
        &admin(&rack, &["settings", "public-address", "ftp://x"]).await,
        "field address",
    );
    let _ = std::fs::remove_dir_all(&dir);
    rack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_update_is_published_from_a_release_laid_out_by_architecture() {
    let rack = Rack::start_with(1, PersonalityChoice::Single(Personality::Generic), 0.01, false).await;
    let release = rack.images_dir().join("release-202612030000");
    let v = "202612030000";
    let mut files = vec![
        format!("x86_64/IncusOS_{v}.efi.gz"),
        format!("x86_64/IncusOS_{v}.usr-x86-64.0a1b.raw.gz"),
        format!("x86_64/IncusOS_{v}.usr-x86-64-verity.0a1b.raw.gz"),
        "x86_64/incus.raw.gz".to_owned(),
        "sb.tar.gz".to_owned(),
    ];
    let write_all = |files: &[String]| {
        for name in files {
            let path = release.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).expect("release dir");
            std::fs::write(&path, name.as_bytes()).expect("release file");
        }
    };
    write_all(&files);
    let dir = release.display().to_string();
    let publish = ["update", "publish", &dir, "--version", v, "--channel", "stable"];
    // The OS update lacks its verity signature: IncusOS could not stage it, so nothing is published.
    assert_refused(&admin(&rack, &publish).await, "incomplete_os_update");
    files.push(format!("x86_64/IncusOS_{v}.usr-x86-64-verity-sig.0a1b.raw.gz"));
    write_all(&files);
    let published = json_out(&admin(&rack, &publish).await);
    assert_eq!(published["version"], v, "{published}");
    let uuid = published["uuid"].as_str().expect("its uuid");

    // Named by their path in the release, each with its architecture; the Secure Boot keys for any.
    let listed: Value = rack
        .http
        .get(format!("{}/1.0/provisioning/updates/{uuid}/files", rack.api_url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut got: Vec<(String, String, String)> = listed["metadata"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or_default().to_owned();
            (s("filename"), s("type"), s("architecture"))
        })
        .collect();
    got.sort();
    let want = |name: &str, t: &str, a: &str| (name.to_owned(), t.to_owned(), a.to_owned());
    assert_eq!(
        got,
        [
            want("sb.tar.gz", "update-secureboot", ""),
            want(&format!("x86_64/IncusOS_{v}.efi.gz"), "update-efi", "x86_64"),
            want(
                &format!("x86_64/IncusOS_{v}.usr-x86-64-verity-sig.0a1b.raw.gz"),
                "update-usr-verity-signature",
                "x86_64"
            ),
            want(
                &format!("x86_64/IncusOS_{v}.usr-x86-64-verity.0a1b.raw.gz"),
                "update-usr-verity",
                "x86_64"
            ),
            want(
                &format!("x86_64/IncusOS_{v}.usr-x86-64.0a1b.raw.gz"),
                "update-usr",
                "x86_64"
            ),
            want("x86_64/incus.raw.gz", "application", "x86_64"),
        ],
        "{listed}"
    );
    rack.stop().await;
}
