//! IncusOS installation media carrying a deployment's seed.
//!
//! IncusOS reads its install seed from a tar archive written at the start of the image's second GPT partition
//! (`doc/reference/seed.md` of IncusOS). A manager serving a multi-GB image to hundreds of servers does not copy
//! it per deployment: it serves the catalog image with the deployment's archive laid over the start of
//! partition 2, every other byte unchanged. This crate holds the three pure parts of that:
//!
//! - [`layout`]: where partition 2 starts and how much it holds, read once when an image enters the catalog;
//! - [`gz`]: a published `.img.gz` / `.iso.gz` decompressed once, beside itself, when it enters the catalog;
//! - [`seed`]: the seed's files (typed after IncusOS's `api/seed` structures) and their archive;
//! - [`compose`]: the overlay applied to any byte range of the image, and a whole composed file for a USB stick;
//! - [`pack`]: an operator's own seed (a directory or an archive) checked and packed for a stick.
//!
//! The API serves [`compose::Overlay::apply`]'d ranges; `racklift media compose` writes
//! [`compose::write_composed`]'s output; both from the same code, so the stick and the virtual media match.

pub mod compose;
pub mod gz;
pub mod layout;
pub mod pack;
pub mod seed;

pub use compose::{Overlay, write_composed};
pub use layout::{ImageLayout, LayoutError, MAX_SEED_BYTES, MediaFormat};
pub use seed::{SeedArchive, SeedError, SeedFiles};
