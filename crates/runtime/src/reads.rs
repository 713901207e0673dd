//! What a component's store may read: the names its descriptor lists in
//! `reads`, held as a bitset so the check on every store call costs a
//! comparison or two.

use esr_contract::Collection;

/// Every name `reads` may hold: the collections, then `organization`
/// (`store.organization`: the organization's name and enrollment token).
pub const READABLE: [&str; 5] =
    [Collection::NAMES[0], Collection::NAMES[1], Collection::NAMES[2], Collection::NAMES[3], ORGANIZATION];
/// The name that grants `store.organization`.
pub const ORGANIZATION: &str = esr_contract::ORGANIZATION;

/// A set of [`READABLE`] names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reads(u8);

impl Reads {
    /// Nothing: what a component gets before its descriptor is known.
    pub const NONE: Reads = Reads(0);

    /// The set these names make, or the first name that is not readable.
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Reads, &'a str> {
        names.into_iter().try_fold(Reads::NONE, |reads, name| bit(name).map(|bit| Reads(reads.0 | bit)).ok_or(name))
    }

    pub fn allows(self, name: &str) -> bool {
        bit(name).is_some_and(|bit| self.0 & bit != 0)
    }

    /// Its names, in [`READABLE`] order.
    pub fn names(self) -> Vec<&'static str> {
        READABLE.into_iter().filter(|name| self.allows(name)).collect()
    }
}

fn bit(name: &str) -> Option<u8> {
    READABLE.iter().position(|readable| *readable == name).map(|index| 1 << index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_allows_exactly_its_names() {
        let reads = Reads::from_names(["scopes", "organization", "scopes"]).expect("readable");
        assert_eq!(reads.names(), ["scopes", "organization"]);
        assert!(reads.allows("scopes") && reads.allows("organization"));
        for other in ["endpoints", "remediation-targets", "vulnerability-findings", "organizations", "meta", ""] {
            assert!(!reads.allows(other), "{other}");
        }
        assert!(Reads::NONE.names().is_empty());
    }

    #[test]
    fn an_unknown_name_is_named() {
        assert_eq!(Reads::from_names(["endpoints", "api-keys", "meta"]), Err("api-keys"));
    }
}
