//! Confirming an insert or an eject by reading the slot back: a BMC's answer says it took the request, only the
//! slot says it did what was asked.

use std::fmt;
use std::time::Duration;

use super::{SlotRef, VirtualMedia};
use crate::client::BmcClient;
use crate::error::Result;

/// What a slot must read back after an insert or an eject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotExpectation<'a> {
    /// Holding exactly this image ([`VirtualMedia::holds`]).
    Holds(&'a str),
    /// Nothing inserted (not [`VirtualMedia::has_media`]).
    Empty,
}

impl SlotExpectation<'_> {
    /// Whether `media` reads as expected.
    pub fn met_by(&self, media: &VirtualMedia) -> bool {
        match self {
            Self::Holds(image) => media.holds(image),
            Self::Empty => !media.has_media(),
        }
    }
}

impl fmt::Display for SlotExpectation<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Holds(image) => write!(f, "holding {image}"),
            Self::Empty => f.write_str("empty"),
        }
    }
}

/// A slot read back against a [`SlotExpectation`].
#[derive(Clone, Debug)]
pub struct SlotReadBack {
    /// The last read.
    pub media: VirtualMedia,
    /// Whether that read met the expectation.
    pub confirmed: bool,
    /// How many reads it took.
    pub reads: u32,
}

/// The pause between two read-backs of a slot: a BMC reflects an insert within a few seconds or not at all.
const READ_BACK_INTERVAL: Duration = Duration::from_millis(500);

impl BmcClient {
    /// Reads `slot` back until it meets `expected`, every 0.5 s for at most `window` after the first read, each
    /// read under the handle's deadline. A BMC may answer an insert or an eject before its slot shows it (an
    /// iDRAC reports the old image for a while after an eject), and one that drops an insert answers 204 and
    /// never shows it: `confirmed: false` with the last read is that answer, for the caller to judge.
    pub async fn verify_media(
        &self,
        slot: &SlotRef,
        expected: SlotExpectation<'_>,
        window: Duration,
    ) -> Result<SlotReadBack> {
        let path = self.within("verify_media", self.slot_path(slot)).await?;
        let until = tokio::time::Instant::now() + window;
        let mut reads = 0;
        loop {
            let media: VirtualMedia = self.within("read_media", self.get_json(&path)).await?;
            reads += 1;
            let confirmed = expected.met_by(&media);
            if confirmed || tokio::time::Instant::now() + READ_BACK_INTERVAL > until {
                return Ok(SlotReadBack {
                    media,
                    confirmed,
                    reads,
                });
            }
            tokio::time::sleep(READ_BACK_INTERVAL).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectations_follow_holds_and_has_media() {
        let image = "http://m/x.iso";
        // (slot as read, met by Holds(image), met by Empty)
        let cases = [
            (r#"{"Image":"http://m/x.iso","Inserted":true}"#, true, false),
            (r#"{"Image":"http://m/x.iso"}"#, true, false),
            (r#"{"Image":"http://m/x.iso","Inserted":false}"#, false, true),
            (r#"{"Image":"http://m/other.iso","Inserted":true}"#, false, false),
            (r#"{"Image":null,"Inserted":false}"#, false, true),
            (r#"{"Image":"","Inserted":false}"#, false, true),
        ];
        for (body, holds, empty) in cases {
            let media: VirtualMedia = serde_json::from_str(body).expect("slot");
            assert_eq!(SlotExpectation::Holds(image).met_by(&media), holds, "{body}");
            assert_eq!(SlotExpectation::Empty.met_by(&media), empty, "{body}");
        }
        assert_eq!(
            SlotExpectation::Holds(image).to_string(),
            "holding http://m/x.iso"
        );
        assert_eq!(SlotExpectation::Empty.to_string(), "empty");
    }
}
