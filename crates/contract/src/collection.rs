//! The collections the public API serves: one value each, named as in the
//! API's paths, from the WIT glue down to each backend.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A collection of records the public API serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Collection {
    Endpoints,
    RemediationTargets,
    Scopes,
    VulnerabilityFindings,
}

impl Collection {
    /// Every collection, in the order of their names.
    pub const ALL: [Collection; 4] =
        [Collection::Endpoints, Collection::RemediationTargets, Collection::Scopes, Collection::VulnerabilityFindings];

    /// Their names, as in the API's paths and the stores' keys, in the
    /// same order.
    pub const NAMES: [&'static str; 4] = ["endpoints", "remediation-targets", "scopes", "vulnerability-findings"];

    /// The collection's name, as in the API's paths and the stores' keys.
    pub const fn name(self) -> &'static str {
        Collection::NAMES[self as usize]
    }

    /// The collection with this name, if there is one.
    pub fn named(name: &str) -> Option<Collection> {
        Collection::ALL.into_iter().find(|collection| collection.name() == name)
    }

    /// Every collection's name, joined for a message (`endpoints, …`).
    pub fn names() -> String {
        Collection::NAMES.join(", ")
    }
}

impl fmt::Display for Collection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl AsRef<str> for Collection {
    fn as_ref(&self) -> &str {
        self.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_serialize_as_the_api_names_them() {
        for collection in Collection::ALL {
            assert_eq!(Collection::named(collection.name()), Some(collection));
            assert_eq!(serde_json::to_value(collection).ok(), Some(serde_json::json!(collection.name())));
        }
        assert_eq!(Collection::named("organization"), None);
        let mut names = Collection::NAMES;
        names.sort_unstable();
        assert_eq!(names, Collection::ALL.map(Collection::name), "ALL is in name order");
    }
}
