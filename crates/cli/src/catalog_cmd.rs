//! The rest of the catalog a deployment is resolved from, through a running API: provisioning tokens and their
//! seeds, BIOS profiles and the public address. Each verb is one API call; `racklift image` is in `image_cmd`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use racklift_store::{BiosProfile, NewSeed, NewToken, ProvisioningToken, Seed};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::client::{ApiArgs, Client, decode};
use crate::output::{key_values, print_json, table, text, truncate};

// --- provisioning tokens ----------------------------------------------------------------------------------------

#[derive(clap::Args)]
pub struct TokenArgs {
    #[command(flatten)]
    api: ApiArgs,
    #[command(subcommand)]
    command: TokenCommand,
}

#[derive(clap::Subcommand)]
enum TokenCommand {
    /// Create a provisioning token: what an installed OS registers with, one use per server.
    Create {
        /// What the token is for.
        #[arg(long, value_name = "TEXT", default_value = "")]
        description: String,
        /// How many servers may register with it.
        #[arg(long, value_name = "N", default_value_t = 1)]
        uses: i32,
        /// How long it stays valid, e.g. 12h, 7d, 2w. It must outlive the deployments using it (the server
        /// registers at their very end), hence a week by default.
        #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = humantime::parse_duration)]
        expires_in: Duration,
        /// Print the API's JSON instead of key: value lines.
        #[arg(long)]
        json: bool,
    },
    /// List the provisioning tokens.
    List {
        /// Print the API's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

pub async fn token(args: TokenArgs) -> anyhow::Result<()> {
    let client = args.api.client()?;
    match args.command {
        TokenCommand::Create {
            description,
            uses,
            expires_in,
            json,
        } => {
            let expires_in = chrono::TimeDelta::from_std(expires_in).context("--expires-in is too long")?;
            let expires_at = chrono::Utc::now()
                .checked_add_signed(expires_in)
                .context("--expires-in is too long")?;
            let body = NewToken {
                description,
                uses_remaining: uses,
                expires_at,
            };
            let token = client
                .post("/1.0/tokens", &serde_json::to_value(&body)?, |r| r)
                .await?;
            if json {
                return print_json(&token);
            }
            let token: ProvisioningToken = decode(&token)?;
            print!(
                "{}",
                key_values(&[
                    ("token", token.token.to_string()),
                    ("description", or_dash(token.description)),
                    ("uses remaining", token.uses_remaining.to_string()),
                    ("expires", token.expires_at.to_rfc3339()),
                ])
            );
            Ok(())
        }
        TokenCommand::List { json } => {
            let tokens = client.get("/1.0/tokens").await?;
            if json {
                return print_json(&tokens);
            }
            let rows: Vec<[String; 4]> = decode::<Vec<ProvisioningToken>>(&tokens)?
                .into_iter()
                .map(|t| {
                    [
                        t.token.to_string(),
                        t.uses_remaining.to_string(),
                        t.expires_at.to_rfc3339(),
                        truncate(&or_dash(t.description), 48),
                    ]
                })
                .collect();
            print!("{}", table(["TOKEN", "USES", "EXPIRES", "DESCRIPTION"], &rows));
            Ok(())
        }
    }
}

/// `-` for an empty text, as the other tables show it.
fn or_dash(s: String) -> String {
    if s.is_empty() { "-".to_owned() } else { s }
}

/// A token goes into the path as given: the API answers a non-UUID with a clear error, and a UUID needs no
/// escaping.
fn seeds_path(token: &str) -> String {
    format!("/1.0/tokens/{token}/seeds")
}

// --- seeds --------------------------------------------------------------------------------------------------------

#[derive(clap::Args)]
pub struct SeedArgs {
    #[command(flatten)]
    api: ApiArgs,
    #[command(subcommand)]
    command: SeedCommand,
}

#[derive(clap::Subcommand)]
enum SeedCommand {
    /// Create a seed (the install configuration a deployment hands the installer) under a token.
    Set {
        /// The provisioning token (a UUID).
        token: String,
        /// The seed's name.
        name: String,
        /// Let deployments use the seed (the deploy endpoint only takes public seeds).
        #[arg(long)]
        public: bool,
        /// Set force_reboot in the install configuration: the server reboots on its own after install, which
        /// deployments need unless forced.
        #[arg(long)]
        force_reboot: bool,
        /// A JSON object to start the install configuration from.
        #[arg(long, value_name = "FILE.json")]
        install_config_file: Option<PathBuf>,
        /// Print the API's JSON instead of key: value lines.
        #[arg(long)]
        json: bool,
    },
    /// List a token's seeds.
    List {
        /// The provisioning token (a UUID).
        token: String,
        /// Print the API's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

pub async fn seed(args: SeedArgs) -> anyhow::Result<()> {
    let client = args.api.client()?;
    match args.command {
        SeedCommand::Set {
            token,
            name,
            public,
            force_reboot,
            install_config_file,
            json,
        } => {
            let mut install_config = match &install_config_file {
                Some(path) => read_object(path)?,
                None => Map::new(),
            };
            if force_reboot {
                install_config.insert("force_reboot".into(), Value::Bool(true));
            }
            let body = NewSeed {
                name,
                public,
                install_config: Value::Object(install_config),
            };
            let seed = client
                .post(&seeds_path(&token), &serde_json::to_value(&body)?, |r| r)
                .await?;
            if json {
                return print_json(&seed);
            }
            let seed: Seed = decode(&seed)?;
            print!(
                "{}",
                key_values(&[
                    ("token", seed.token.to_string()),
                    ("name", seed.name),
                    ("public", seed.public.to_string()),
                    ("install config", seed.install_config.to_string()),
                ])
            );
            Ok(())
        }
        SeedCommand::List { token, json } => {
            let seeds = client.get(&seeds_path(&token)).await?;
            if json {
                return print_json(&seeds);
            }
            let rows: Vec<[String; 4]> = decode::<Vec<Seed>>(&seeds)?
                .into_iter()
                .map(|s| {
                    let force_reboot = s.force_reboot().to_string();
                    [
                        s.name,
                        s.public.to_string(),
                        force_reboot,
                        s.created_at.to_rfc3339(),
                    ]
                })
                .collect();
            print!("{}", table(["NAME", "PUBLIC", "FORCE REBOOT", "CREATED"], &rows));
            Ok(())
        }
    }
}

/// A file holding one JSON object, with the file named in every error.
fn read_object(path: &Path) -> anyhow::Result<Map<String, Value>> {
    let data = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    match serde_json::from_slice(&data).with_context(|| format!("{} is not JSON", path.display()))? {
        Value::Object(o) => Ok(o),
        _ => bail!("{} must hold a JSON object", path.display()),
    }
}

// --- BIOS profiles ------------------------------------------------------------------------------------------------

#[derive(clap::Args)]
pub struct ProfileArgs {
    #[command(flatten)]
    api: ApiArgs,
    #[command(subcommand)]
    command: ProfileCommand,
}

#[derive(clap::Subcommand)]
enum ProfileCommand {
    // Boxed: its match flags make it far larger than the other commands.
    /// Create or replace a BIOS profile (the whole profile: what neither the file nor a flag sets is cleared).
    Set(Box<SetProfile>),
    /// List the BIOS profiles.
    List {
        /// Print the API's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Delete a BIOS profile (deployments already planned keep the attributes they took from it).
    Remove {
        /// The profile's name.
        name: String,
        /// Print the API's answer (`null`: it has no body) instead of a sentence.
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args)]
struct SetProfile {
    /// The profile's name.
    name: String,
    /// The profile as the API takes it: {match_rules, priority, attributes, deferred_attributes, secure_boot}.
    /// The flags below are applied on top.
    #[arg(long, value_name = "PROFILE.json")]
    file: Option<PathBuf>,
    /// Where profiles overlap, the higher priority wins attribute by attribute.
    #[arg(long, value_name = "N")]
    priority: Option<i32>,
    /// Apply only to servers with this vendor hint.
    #[arg(long, value_name = "VENDOR")]
    match_vendor: Option<String>,
    /// Apply only to servers whose name starts with this.
    #[arg(long, value_name = "PREFIX")]
    match_name_prefix: Option<String>,
    /// Apply only to servers whose BMC reports this ComputerSystem Manufacturer (any case): "Dell Inc.".
    #[arg(long, value_name = "MANUFACTURER")]
    match_manufacturer: Option<String>,
    /// Apply only to servers whose BMC reports a ComputerSystem Model starting with this (any case).
    #[arg(long, value_name = "MODEL")]
    match_model: Option<String>,
    /// Apply only to servers whose BMC reports this ComputerSystem SKU (any case).
    #[arg(long, value_name = "SKU")]
    match_sku: Option<String>,
    /// Apply only to servers whose Bios resource names this AttributeRegistry; without a version
    /// ("BiosAttributeRegistryA42") any version matches.
    #[arg(long, value_name = "REGISTRY")]
    match_attribute_registry: Option<String>,
    /// A BIOS attribute, NAME=VALUE; true/false and integers are typed, anything else is a string (a JSON
    /// string, NAME="4", forces one).
    #[arg(long = "attribute", value_name = "NAME=VALUE", value_parser = attribute)]
    attributes: Vec<(String, Value)>,
    /// An attribute applied in a second pass, once the first pass is in effect (SR-IOV after the IOMMU, say).
    #[arg(long = "deferred-attribute", value_name = "NAME=VALUE", value_parser = attribute)]
    deferred_attributes: Vec<(String, Value)>,
    /// Print the API's JSON instead of key: value lines.
    #[arg(long)]
    json: bool,
}

fn attribute(s: &str) -> Result<(String, Value), String> {
    let (name, value) = s
        .split_once('=')
        .filter(|(name, _)| !name.is_empty())
        .ok_or_else(|| format!("{s:?} is not NAME=VALUE"))?;
    let value = match serde_json::from_str(value) {
        Ok(v @ (Value::Bool(_) | Value::Number(_) | Value::String(_))) => v,
        _ => Value::String(value.to_owned()),
    };
    Ok((name.to_owned(), value))
}

impl SetProfile {
    /// The body: the file's document (kept as a document, so fields this CLI does not know reach the API as
    /// written) with the name and the flags applied.
    fn body(&self) -> anyhow::Result<Value> {
        let mut doc = match &self.file {
            Some(path) => read_object(path)?,
            None => Map::new(),
        };
        if let Some(named) = doc.get("name").and_then(Value::as_str)
            && named != self.name
        {
            bail!(
                "{} names the profile {named:?}, the argument {:?}: make them agree",
                self.file.as_deref().unwrap_or(Path::new("-")).display(),
                self.name
            );
        }
        doc.insert("name".into(), json!(self.name));
        if let Some(priority) = self.priority {
            doc.insert("priority".into(), json!(priority));
        }
        for (key, value) in [
            ("vendor", &self.match_vendor),
            ("name_prefix", &self.match_name_prefix),
            ("manufacturer", &self.match_manufacturer),
            ("model", &self.match_model),
            ("sku", &self.match_sku),
            ("attribute_registry", &self.match_attribute_registry),
        ] {
            if let Some(value) = value {
                object_at(&mut doc, "match_rules")?.insert(key.into(), json!(value));
            }
        }
        for (field, attributes) in [
            ("attributes", &self.attributes),
            ("deferred_attributes", &self.deferred_attributes),
        ] {
            for (name, value) in attributes {
                object_at(&mut doc, field)?.insert(name.clone(), value.clone());
            }
        }
        Ok(Value::Object(doc))
    }
}

/// The object under `key`, created when absent or null.
fn object_at<'a>(doc: &'a mut Map<String, Value>, key: &str) -> anyhow::Result<&'a mut Map<String, Value>> {
    let entry = doc.entry(key).or_insert(Value::Null);
    if entry.is_null() {
        *entry = Value::Object(Map::new());
    }
    entry
        .as_object_mut()
        .with_context(|| format!("the profile's {key} must be a JSON object"))
}

pub async fn bios_profile(args: ProfileArgs) -> anyhow::Result<()> {
    let client = args.api.client()?;
    match args.command {
        ProfileCommand::Set(set) => {
            let profile = client.post("/1.0/bios-profiles", &set.body()?, |r| r).await?;
            if set.json {
                return print_json(&profile);
            }
            let profile: BiosProfile = decode(&profile)?;
            print!(
                "{}",
                key_values(&[
                    ("name", profile.name),
                    ("priority", profile.priority.to_string()),
                    ("match", match_text(&profile.match_rules)),
                    ("attributes", pairs(&profile.attributes)),
                    ("deferred attributes", pairs(&profile.deferred_attributes)),
                    ("secure boot", profile.secure_boot.to_string()),
                ])
            );
            Ok(())
        }
        ProfileCommand::List { json } => list_profiles(&client, json).await,
        ProfileCommand::Remove { name, json } => {
            // Names go into the path unescaped: the API restricts them to characters that need no escaping.
            let answer = client.delete(&format!("/1.0/bios-profiles/{name}")).await?;
            if json {
                return print_json(&answer);
            }
            println!("BIOS profile {name}: removed");
            Ok(())
        }
    }
}

async fn list_profiles(client: &Client, as_json: bool) -> anyhow::Result<()> {
    let profiles = client.get("/1.0/bios-profiles").await?;
    if as_json {
        return print_json(&profiles);
    }
    let rows: Vec<[String; 5]> = decode::<Vec<BiosProfile>>(&profiles)?
        .into_iter()
        .map(|p| {
            let (rules, attributes) = (match_text(&p.match_rules), truncate(&pairs(&p.attributes), 48));
            let deferred = truncate(&pairs(&p.deferred_attributes), 32);
            [p.name, p.priority.to_string(), rules, attributes, deferred]
        })
        .collect();
    print!(
        "{}",
        table(["NAME", "PRIORITY", "MATCH", "ATTRIBUTES", "DEFERRED"], &rows)
    );
    Ok(())
}

/// `vendor=dell name_prefix=rack1-`, or `all servers` for a profile without rules.
fn match_text(rules: &Value) -> String {
    let shown = pairs(rules);
    if shown == "-" {
        "all servers".to_owned()
    } else {
        shown
    }
}

/// An object's entries as `k=v` separated by spaces; `-` when there are none.
fn pairs(v: &Value) -> String {
    let shown: Vec<String> = v
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", text(v)))
        .collect();
    if shown.is_empty() {
        "-".to_owned()
    } else {
        shown.join(" ")
    }
}

// --- settings -----------------------------------------------------------------------------------------------------

#[derive(clap::Args)]
pub struct SettingsArgs {
    #[command(flatten)]
    api: ApiArgs,
    #[command(subcommand)]
    command: SettingsCommand,
}

#[derive(clap::Subcommand)]
enum SettingsCommand {
    /// Show the public address installation media URLs are built from, or set it.
    PublicAddress {
        /// The address BMCs and installers reach the API at, e.g. https://racklift.example:7878; without it the
        /// current one is shown.
        url: Option<String>,
        /// Print the API's JSON instead of a key: value line.
        #[arg(long)]
        json: bool,
    },
}

/// `PUT /1.0/settings/public-address`.
#[derive(Serialize)]
struct PublicAddress {
    address: String,
}

/// The answer of `GET` and `PUT /1.0/settings/public-address`: no address until one is set.
#[derive(Deserialize)]
struct PublicAddressView {
    address: Option<String>,
}

pub async fn settings(args: SettingsArgs) -> anyhow::Result<()> {
    let client = args.api.client()?;
    match args.command {
        SettingsCommand::PublicAddress { url, json } => {
            const PATH: &str = "/1.0/settings/public-address";
            let answer = match url {
                Some(address) => {
                    let body = serde_json::to_value(PublicAddress { address })?;
                    client.put(PATH, &body).await?
                }
                None => client.get(PATH).await?,
            };
            if json {
                return print_json(&answer);
            }
            let address = decode::<PublicAddressView>(&answer)?
                .address
                .unwrap_or_else(|| "not set".to_owned());
            print!("{}", key_values(&[("public address", address)]));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_typed_unless_quoted() {
        assert_eq!(attribute("A=true").unwrap(), ("A".into(), json!(true)));
        assert_eq!(attribute("A=4").unwrap(), ("A".into(), json!(4)));
        assert_eq!(attribute("A=\"4\"").unwrap(), ("A".into(), json!("4")));
        assert_eq!(attribute("A=Enabled").unwrap(), ("A".into(), json!("Enabled")));
        assert_eq!(attribute("A=[1]").unwrap(), ("A".into(), json!("[1]")));
        assert_eq!(attribute("A=").unwrap(), ("A".into(), json!("")));
        assert!(attribute("=x").is_err());
        assert!(attribute("A").is_err());
    }

    fn set(name: &str) -> SetProfile {
        SetProfile {
            name: name.into(),
            file: None,
            priority: None,
            match_vendor: None,
            match_name_prefix: None,
            match_manufacturer: None,
            match_model: None,
            match_sku: None,
            match_attribute_registry: None,
            attributes: Vec::new(),
            deferred_attributes: Vec::new(),
            json: false,
        }
    }

    #[test]
    fn profile_flags_build_the_document() {
        let mut p = set("dell-base");
        p.priority = Some(3);
        p.match_vendor = Some("dell".into());
        p.match_manufacturer = Some("Dell Inc.".into());
        p.match_model = Some("PowerEdge R7".into());
        p.match_sku = Some("F54P1G3".into());
        p.match_attribute_registry = Some("BiosAttributeRegistry".into());
        p.attributes = vec![("BootMode".into(), json!("Uefi"))];
        p.deferred_attributes = vec![("SriovGlobalEnable".into(), json!("Enabled"))];
        assert_eq!(
            p.body().unwrap(),
            json!({ "name": "dell-base", "priority": 3,
                    "match_rules": { "vendor": "dell", "manufacturer": "Dell Inc.", "model": "PowerEdge R7",
                                     "sku": "F54P1G3", "attribute_registry": "BiosAttributeRegistry" },
                    "attributes": { "BootMode": "Uefi" },
                    "deferred_attributes": { "SriovGlobalEnable": "Enabled" } })
        );
        assert_eq!(set("x").body().unwrap(), json!({ "name": "x" }));
    }

    #[test]
    fn a_file_naming_another_profile_is_refused() {
        let path = std::env::temp_dir().join(format!("racklift-profile-{}.json", std::process::id()));
        std::fs::write(&path, br#"{"name": "other", "attributes": {"A": 1}}"#).unwrap();
        let mut p = set("mine");
        p.file = Some(path.clone());
        let error = p.body().unwrap_err().to_string();
        std::fs::write(&path, br#"{"attributes": {"A": 1}}"#).unwrap();
        let body = p.body().unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(error.contains("\"other\""), "{error}");
        assert_eq!(body, json!({ "name": "mine", "attributes": { "A": 1 } }));
    }
}
