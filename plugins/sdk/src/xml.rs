//! XML reports read safely: a streaming parser
//! (`quick-xml`) that never reads a DTD, so no entity a report declares is
//! ever expanded and nothing outside the report is ever fetched; bounded
//! depth, text and attribute sizes; UTF-8 only.
//!
//! A report is walked once. The elements an importer asks for (its
//! records: a Nessus `ReportHost`, a Greenbone `result`) are built one at
//! a time as small trees ([`Element`]) and handed over, so memory follows
//! the largest record, not the report ([`for_each_record`]). Small
//! documents can be read whole ([`parse_document`]).
//!
//! Every refusal is [`ReportError::Invalid`] naming the line and column
//! and what was wrong (the host's `422`).

use quick_xml::XmlVersion;
use quick_xml::events::{BytesStart, Event};
use quick_xml::reader::Reader;

use crate::report::ReportError;

/// Elements nested deeper than this are refused: reports nest a dozen
/// levels; a document nesting thousands is an attack on the parser.
pub const MAX_DEPTH: usize = 64;
/// The most text one element may hold (a Nessus `plugin_output` of a
/// credentialed Windows scan runs to hundreds of kilobytes).
pub const MAX_TEXT_BYTES: usize = 8 << 20;
/// The most bytes one attribute value may hold.
pub const MAX_ATTRIBUTE_BYTES: usize = 64 << 10;
/// The most attributes one element may carry.
pub const MAX_ATTRIBUTES: usize = 256;
/// The most characters of a reason an error gives; what it quotes of the
/// document is cut there.
const MAX_REASON_CHARS: usize = 512;

/// One element of a record, with its attributes, text and children.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Element {
    /// Its name as written, prefix included (`cm:compliance-result`).
    pub name: String,
    pub attributes: Vec<(String, String)>,
    /// Its text, CDATA included, entity and character references
    /// resolved, whitespace kept; the text of children is theirs.
    pub text: String,
    pub children: Vec<Element>,
    /// The 1-based line its start tag is on, for messages.
    pub line: u32,
}

impl Element {
    /// The value of attribute `name`, as written (not trimmed).
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
    }

    /// The value of attribute `name`, trimmed; `None` when blank.
    pub fn attribute_text(&self, name: &str) -> Option<&str> {
        self.attribute(name).map(str::trim).filter(|value| !value.is_empty())
    }

    /// The first child named `name`.
    pub fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|child| child.name == name)
    }

    /// Every child named `name`, in order.
    pub fn children_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
        self.children.iter().filter(move |child| child.name == name)
    }

    /// The element at `path` below this one, each step the first child of
    /// that name.
    pub fn find(&self, path: &[&str]) -> Option<&Element> {
        path.iter().try_fold(self, |element, name| element.child(name))
    }

    /// Its own text, trimmed; `None` when blank.
    pub fn text(&self) -> Option<&str> {
        Some(self.text.trim()).filter(|text| !text.is_empty())
    }

    /// The trimmed text of the first child named `name`; `None` when there
    /// is none or it is blank.
    pub fn child_text(&self, name: &str) -> Option<&str> {
        self.child(name).and_then(Element::text)
    }
}

/// The name and attributes of a document's root element, reading only
/// what comes before it: for `detect`, cheap and total (`None` for
/// anything that is not XML up to its root).
pub fn root(report: &[u8]) -> Option<Element> {
    let text = std::str::from_utf8(prefix_up_to_root(report)?).ok()?;
    let mut reader = Reader::from_str(text);
    loop {
        match reader.read_event().ok()? {
            Event::Start(start) | Event::Empty(start) => {
                let mut element = start_element(&reader, &start, text, &mut Lines::default()).ok()?;
                element.line = 1;
                return Some(element);
            }
            Event::Decl(_) | Event::Comment(_) | Event::PI(_) | Event::DocType(_) => continue,
            Event::Text(text) if text.trim().is_empty() => continue,
            _ => return None,
        }
    }
}

/// The bytes up to and including the root's start tag (at most 64 KiB in),
/// so `detect` never parses a whole report.
fn prefix_up_to_root(report: &[u8]) -> Option<&[u8]> {
    const LOOK: usize = 64 << 10;
    let window = &report[..report.len().min(LOOK)];
    // The first `<` followed by a name character starts the root (the
    // prolog's `<?`, `<!` are skipped); its tag ends at the next `>`.
    let mut at = 0;
    while let Some(offset) = window[at..].iter().position(|byte| *byte == b'<') {
        let start = at + offset;
        match window.get(start + 1) {
            Some(b'?' | b'!') => {
                at = start + 1;
            }
            Some(_) => {
                let end = start + window[start..].iter().position(|byte| *byte == b'>')?;
                return Some(&window[..=end]);
            }
            None => return None,
        }
    }
    None
}

/// Reads the whole document into one tree (its root). For reports whose
/// parts refer to each other across the document (a Qualys glossary, Nexpose
/// definitions); the bounds of [`for_each_record`] apply.
pub fn parse_document(report: &[u8]) -> Result<Element, ReportError> {
    let mut root = None;
    for_each_record(
        report,
        |path| path.len() == 1,
        |_, element| {
            root = Some(element);
            Ok(())
        },
    )?;
    root.ok_or_else(|| ReportError::Invalid("the XML document has no root element".into()))
}

/// Walks `report`, building every element whose path (the names from the
/// root down to it) `is_record` accepts, and handing it to `on_record`
/// with its parents' names. Records are not nested: inside one, nothing
/// else is asked about. Everything outside records is checked and
/// dropped.
pub fn for_each_record(
    report: &[u8],
    mut is_record: impl FnMut(&[String]) -> bool,
    mut on_record: impl FnMut(&[String], Element) -> Result<(), ReportError>,
) -> Result<(), ReportError> {
    let text = utf8(report)?;
    let mut reader = Reader::from_str(text);
    reader.config_mut().check_end_names = true;
    let mut path: Vec<String> = Vec::new();
    // The record being built, as the stack of its open elements.
    let mut building: Vec<Element> = Vec::new();
    let mut seen_root = false;
    let mut lines = Lines::default();
    loop {
        let position = reader.buffer_position();
        let event = reader.read_event().map_err(|error| {
            let at = usize::try_from(reader.error_position()).unwrap_or(usize::MAX);
            invalid_at(text, at, &format!("not well-formed XML: {error}"))
        })?;
        let at = usize::try_from(position).unwrap_or(usize::MAX);
        match event {
            Event::Start(start) | Event::Empty(start) if seen_root && path.is_empty() => {
                let _ = start;
                return Err(invalid_at(text, at, "not well-formed XML: a second root element"));
            }
            Event::Start(start) => {
                seen_root = true;
                let element = start_element(&reader, &start, text, &mut lines)?;
                if path.len() >= MAX_DEPTH {
                    return Err(invalid_at(text, at, &format!("elements nest deeper than {MAX_DEPTH} levels")));
                }
                path.push(element.name.clone());
                if !building.is_empty() || is_record(&path) {
                    building.push(element);
                }
            }
            Event::Empty(start) => {
                seen_root = true;
                let element = start_element(&reader, &start, text, &mut lines)?;
                if path.len() >= MAX_DEPTH {
                    return Err(invalid_at(text, at, &format!("elements nest deeper than {MAX_DEPTH} levels")));
                }
                path.push(element.name.clone());
                let record = building.is_empty() && is_record(&path);
                path.pop();
                match building.last_mut() {
                    Some(parent) => parent.children.push(element),
                    None if record => on_record(&path, element)?,
                    None => {}
                }
            }
            Event::End(_) => {
                path.pop();
                if let Some(element) = building.pop() {
                    match building.last_mut() {
                        Some(parent) => parent.children.push(element),
                        None => on_record(&path, element)?,
                    }
                }
            }
            Event::Text(content) => {
                if let Some(element) = building.last_mut() {
                    push_text(element, &content.xml10_content(), text, at)?;
                } else if path.is_empty() && !content.trim().is_empty() {
                    return Err(invalid_at(text, at, "not well-formed XML: text outside the root element"));
                }
            }
            Event::CData(content) => {
                if let Some(element) = building.last_mut() {
                    push_text(element, &content.xml10_content(), text, at)?;
                }
            }
            Event::GeneralRef(reference) => {
                let resolved = match reference.resolve_char_ref() {
                    Ok(Some(character)) => character.to_string(),
                    Ok(None) => {
                        let name: &str = &reference;
                        match predefined_entity(name) {
                            Some(character) => character.to_string(),
                            None => {
                                return Err(invalid_at(
                                    text,
                                    at,
                                    &format!(
                                        "the entity &{}; is not one of XML's five: entities a document declares are never expanded",
                                        name.chars().take(64).collect::<String>()
                                    ),
                                ));
                            }
                        }
                    }
                    Err(error) => return Err(invalid_at(text, at, &format!("a bad character reference: {error}"))),
                };
                if let Some(element) = building.last_mut() {
                    push_text(element, &resolved, text, at)?;
                }
            }
            Event::DocType(doctype) => {
                // An external DTD is named, never fetched; declarations inside
                // the document (where entities are made) are refused.
                if doctype.contains('[') {
                    return Err(invalid_at(
                        text,
                        at,
                        "the document declares a DTD (entities): declarations are never read, and a report needs none",
                    ));
                }
            }
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) => {}
            Event::Eof => {
                if !path.is_empty() {
                    return Err(invalid_at(
                        text,
                        at,
                        &format!("not well-formed XML: <{}> is never closed", path.join("/")),
                    ));
                }
                if !seen_root {
                    return Err(ReportError::Invalid("not XML: the document has no root element".into()));
                }
                return Ok(());
            }
        }
    }
}

fn predefined_entity(name: &str) -> Option<char> {
    Some(match name {
        "lt" => '<',
        "gt" => '>',
        "amp" => '&',
        "apos" => '\'',
        "quot" => '"',
        _ => return None,
    })
}

fn push_text(element: &mut Element, piece: &str, text: &str, at: usize) -> Result<(), ReportError> {
    if element.text.len() + piece.len() > MAX_TEXT_BYTES {
        return Err(invalid_at(
            text,
            at,
            &format!("<{}> holds more than {} MiB of text", element.name, MAX_TEXT_BYTES >> 20),
        ));
    }
    element.text.push_str(piece);
    Ok(())
}

/// An element from its start tag, its attributes checked and unescaped.
fn start_element(
    reader: &Reader<&[u8]>,
    start: &BytesStart,
    text: &str,
    lines: &mut Lines,
) -> Result<Element, ReportError> {
    let at = usize::try_from(reader.buffer_position()).unwrap_or(usize::MAX);
    let name = start.name().as_ref().to_owned();
    let mut attributes = Vec::new();
    for attribute in start.attributes() {
        let attribute =
            attribute.map_err(|error| invalid_at(text, at, &format!("not well-formed XML in <{name}>: {error}")))?;
        if attributes.len() >= MAX_ATTRIBUTES {
            return Err(invalid_at(text, at, &format!("<{name}> has more than {MAX_ATTRIBUTES} attributes")));
        }
        if attribute.value.len() > MAX_ATTRIBUTE_BYTES {
            return Err(invalid_at(
                text,
                at,
                &format!("an attribute of <{name}> holds more than {} KiB", MAX_ATTRIBUTE_BYTES >> 10),
            ));
        }
        let key = attribute.key.as_ref().to_owned();
        let value = attribute.normalized_value(XmlVersion::Implicit1_0).map_err(|error| {
            invalid_at(
                text,
                at,
                &format!("the attribute {key} of <{name}>: {error} (entities a document declares are never expanded)"),
            )
        })?;
        attributes.push((key, value.into_owned()));
    }
    Ok(Element { name, attributes, text: String::new(), children: Vec::new(), line: lines.line_at(text, at) })
}

/// The line of a position, counted on from the last one asked about: the
/// reader only moves forward, so a document's lines are counted once.
#[derive(Default)]
struct Lines {
    at: usize,
    newlines: usize,
}

impl Lines {
    fn line_at(&mut self, text: &str, at: usize) -> u32 {
        let at = at.min(text.len());
        if at < self.at {
            return line_column(text, at).0;
        }
        self.newlines += text.as_bytes()[self.at..at].iter().filter(|byte| **byte == b'\n').count();
        self.at = at;
        u32::try_from(self.newlines + 1).unwrap_or(u32::MAX)
    }
}

/// The report as text, or where it stops being UTF-8.
fn utf8(report: &[u8]) -> Result<&str, ReportError> {
    std::str::from_utf8(report).map_err(|error| {
        let valid = &report[..error.valid_up_to()];
        // Valid UTF-8 up to there, so the position is counted in it.
        let text = std::str::from_utf8(valid).unwrap_or_default();
        let (line, column) = line_column(text, text.len());
        ReportError::Invalid(format!("not UTF-8 at line {line}, column {column}: XML reports are read as UTF-8"))
    })
}

fn invalid_at(text: &str, at: usize, reason: &str) -> ReportError {
    let (line, column) = line_column(text, at.min(text.len()));
    // A reason quotes the document (a name, a parser's message about it):
    // bounded, so a 30 MB tag name is not echoed back whole.
    let reason = match reason.char_indices().nth(MAX_REASON_CHARS) {
        Some((cut, _)) => format!("{}…", &reason[..cut]),
        None => reason.to_owned(),
    };
    ReportError::Invalid(format!("line {line}, column {column}: {reason}"))
}

/// The 1-based line and column (in characters) of byte `at` of `text`.
fn line_column(text: &str, at: usize) -> (u32, u32) {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let before = &text[..at];
    let line = before.bytes().filter(|byte| *byte == b'\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    let column = before[line_start..].chars().count() + 1;
    (u32::try_from(line).unwrap_or(u32::MAX), u32::try_from(column).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(xml: &str, record: &str) -> Result<Vec<Element>, ReportError> {
        let mut found = Vec::new();
        for_each_record(
            xml.as_bytes(),
            |path| path.last().is_some_and(|name| name == record),
            |_, element| {
                found.push(element);
                Ok(())
            },
        )?;
        Ok(found)
    }

    fn refused(xml: &[u8]) -> String {
        match for_each_record(xml, |_| true, |_, _| Ok(())) {
            Err(ReportError::Invalid(reason)) => reason,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn records_come_with_attributes_text_cdata_and_references() {
        let xml = "<?xml version=\"1.0\"?>\n<!-- c -->\n<!DOCTYPE r SYSTEM \"http://example.com/r.dtd\">\n<r><h name=\"a&amp;b\"><t>x &lt; y &#65;</t><c><![CDATA[doesn&apos;t]]></c><e k=\"v\"/></h><h name=\"2\"/></r>";
        let found = records(xml, "h").expect("the records");
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].attribute("name"), Some("a&b"));
        assert_eq!(found[0].child_text("t"), Some("x < y A"));
        assert_eq!(found[0].child_text("c"), Some("doesn&apos;t"));
        assert_eq!(found[0].child("e").and_then(|e| e.attribute("k")), Some("v"));
        assert_eq!(found[1].attribute("name"), Some("2"));
        assert_eq!(found[0].line, 4);
        assert_eq!(root(xml.as_bytes()).map(|root| root.name), Some("r".to_owned()));
    }

    #[test]
    fn dtds_entities_depth_sizes_and_bad_bytes_are_refused() {
        let laughs = "<?xml version=\"1.0\"?><!DOCTYPE lolz [<!ENTITY lol \"lol\"><!ENTITY lol2 \"&lol;&lol;\">]><lolz>&lol2;</lolz>";
        assert!(refused(laughs.as_bytes()).contains("DTD"));
        let undeclared = "<r>&lol9;</r>";
        assert!(refused(undeclared.as_bytes()).contains("&lol9;"));
        let deep = format!("{}{}", "<a>".repeat(100_000), "</a>".repeat(100_000));
        assert!(refused(deep.as_bytes()).contains("deeper than 64"));
        let big = format!("<r>{}</r>", "x".repeat(MAX_TEXT_BYTES + 1));
        assert!(refused(big.as_bytes()).contains("MiB of text"));
        let big_attribute = format!("<r a=\"{}\"/>", "x".repeat(MAX_ATTRIBUTE_BYTES + 1));
        assert!(refused(big_attribute.as_bytes()).contains("KiB"));
        // A long name is quoted no further than a reason's bound.
        for long_name in [format!("<r><{}>", "n".repeat(1 << 20)), format!("<r><a></{}></r>", "n".repeat(1 << 20))] {
            let reason = refused(long_name.as_bytes());
            assert!(reason.chars().count() < MAX_REASON_CHARS + 64 && reason.ends_with('…'), "{}", reason.len());
        }
        assert!(
            refused(b"<r>\n\xff</r>").contains("line 2, column 1: not UTF-8")
                || refused(b"<r>\n\xff</r>").contains("not UTF-8")
        );
        assert!(refused(b"<r><a></b></r>").contains("not well-formed"));
        assert!(refused(b"<r>").contains("never closed"));
        assert!(refused(b"").contains("no root"));
        assert!(refused(b"<r/><s/>").contains("second root"));
        assert_eq!(root(b"{\"a\": 1}"), None);
        assert_eq!(root(b"\xff\xfe"), None);
    }

    #[test]
    fn every_hostile_document_is_refused_saying_why() {
        for (what, bytes) in crate::scanner_reports::hostile_xml_inputs("Report") {
            match for_each_record(&bytes, |_| true, |_, _| Ok(())) {
                Err(ReportError::Invalid(reason)) => assert!(reason.contains("line "), "{what}: {reason}"),
                other => panic!("{what}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_whole_document_is_one_tree() {
        let document = parse_document(b"<r a=\"1\"><x>1</x><x>2</x></r>").expect("the document");
        assert_eq!(document.children_named("x").filter_map(Element::text).collect::<Vec<_>>(), ["1", "2"]);
        assert_eq!(document.attribute_text("a"), Some("1"));
    }
}
