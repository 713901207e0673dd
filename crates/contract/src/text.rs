//! What text the records may hold, and the form names are compared in.
//!
//! Text that displays other than it reads is refused where it is stored
//! ([`refusal`]), and names are matched in one form ([`match_key`],
//! [`skeleton_key`]), so that a name written with look-alike or invisible
//! characters can neither pass for another nor escape a filter written for
//! it.
//!
//! | Character | [`Form::Line`] | [`Form::Lines`] | [`Form::Name`] |
//! |---|---|---|---|
//! | control (C0, DEL, C1) | refused | refused but `\n`, `\r`, `\t` | refused |
//! | format (category Cf: bidi controls, zero-width space, joiners, BOM, soft hyphen, word joiner, tags, interlinear annotations) | refused | refused but ZWNJ and ZWJ | refused |
//! | line and paragraph separators (Zl, Zp) | refused | kept | refused |
//! | noncharacters (U+FDD0–U+FDEF, U+xFFFE, U+xFFFF) | refused | refused | refused |
//! | other default-ignorable characters (variation selectors, the combining grapheme joiner, Hangul fillers) | kept | kept | refused |
//! | a word mixing Latin with Cyrillic or Greek (or scripts no single writing system uses together) | kept | kept | refused |
//!
//! Multi-line free text keeps the zero-width non-joiner and joiner: Persian
//! and Indic spelling and emoji sequences need them, and nothing matches on
//! free text.

use std::borrow::Cow;

use unicode_normalization::UnicodeNormalization;
use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};
use unicode_script::{Script, UnicodeScript};
use unicode_security::mixed_script::AugmentedScriptSet;

/// The kinds of text a field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// One line of text (titles, versions, paths).
    Line,
    /// Free text over several lines (descriptions, notes).
    Lines,
    /// A name that records are matched by (products, vendors, tags):
    /// one line, stricter still.
    Name,
}

/// Why `text` may not be stored as `form`, naming its first character (or
/// word) that is refused; `None` when it may.
pub fn refusal(text: &str, form: Form) -> Option<String> {
    for character in text.chars() {
        if let Some(reason) = character_refusal(character, form) {
            return Some(reason);
        }
    }
    if form == Form::Name {
        return mixed_script_word(text).map(|(word, scripts)| {
            format!(
                "the word {:?} mixes the {} scripts, as look-alikes of other names do (Unicode TS #39)",
                word.escape_debug().to_string(),
                scripts.join(" and ")
            )
        });
    }
    None
}

fn character_refusal(character: char, form: Form) -> Option<String> {
    // Most stored text is printable ASCII, which no rule refuses: skip the
    // Unicode tables' lookups for it.
    if character.is_ascii_graphic() || character == ' ' {
        return None;
    }
    let code = u32::from(character);
    let multiline = form == Form::Lines;
    if character.is_control() {
        return match character {
            '\n' | '\r' | '\t' if multiline => None,
            '\n' | '\r' | '\t' => Some(format!(
                "contains the control character U+{code:04X}; line breaks and tabs only in multi-line text"
            )),
            _ => Some(format!("contains the control character U+{code:04X}")),
        };
    }
    if is_bidi_control(character) {
        return Some(format!("contains the bidirectional formatting character U+{code:04X}"));
    }
    if is_noncharacter(character) {
        return Some(format!("contains the noncharacter U+{code:04X}"));
    }
    match character.general_category() {
        GeneralCategory::Format if multiline && is_joiner(character) => None,
        GeneralCategory::Format => {
            Some(format!("contains the invisible format character U+{code:04X} ({})", format_name(character)))
        }
        GeneralCategory::LineSeparator | GeneralCategory::ParagraphSeparator if !multiline => {
            Some(format!("contains the line or paragraph separator U+{code:04X}; line breaks only in multi-line text"))
        }
        _ if form == Form::Name && is_default_ignorable(character) => {
            Some(format!("contains the invisible character U+{code:04X} ({})", ignorable_name(character)))
        }
        _ => None,
    }
}

/// Marks and embeddings, overrides and isolates that reorder displayed
/// text (all of category Cf).
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Code points Unicode sets aside never to be characters: U+FDD0–U+FDEF
/// and the last two of every plane.
pub fn is_noncharacter(c: char) -> bool {
    let code = u32::from(c);
    (0xFDD0..=0xFDEF).contains(&code) || code & 0xFFFE == 0xFFFE
}

/// The zero-width non-joiner and joiner, which multi-line text keeps.
fn is_joiner(c: char) -> bool {
    matches!(c, '\u{200C}' | '\u{200D}')
}

/// Variation selectors (standardized, ideographic and Mongolian).
pub fn is_variation_selector(c: char) -> bool {
    matches!(c, '\u{180B}'..='\u{180D}' | '\u{180F}' | '\u{FE00}'..='\u{FE0F}' | '\u{E0100}'..='\u{E01EF}')
}

/// Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt):
/// what renders as nothing unless a font says otherwise.
pub fn is_default_ignorable(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{061C}'
            | '\u{115F}'..='\u{1160}'
            | '\u{17B4}'..='\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF0}'..='\u{FFF8}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E0FFF}'
    )
}

/// What a refused format character is, in a few words.
fn format_name(c: char) -> &'static str {
    match c {
        '\u{00AD}' => "soft hyphen",
        '\u{200B}' => "zero-width space",
        '\u{200C}' => "zero-width non-joiner",
        '\u{200D}' => "zero-width joiner",
        '\u{2060}' => "word joiner",
        '\u{FEFF}' => "byte order mark",
        '\u{FFF9}'..='\u{FFFB}' => "interlinear annotation",
        '\u{E0001}' | '\u{E0020}'..='\u{E007F}' => "tag character",
        _ => "format character",
    }
}

fn ignorable_name(c: char) -> &'static str {
    match c {
        _ if is_variation_selector(c) => "a variation selector",
        '\u{034F}' => "the combining grapheme joiner",
        '\u{115F}' | '\u{1160}' | '\u{3164}' | '\u{FFA0}' => "a Hangul filler",
        _ => "a default-ignorable character",
    }
}

/// The first word of `name` (a run of letters, digits and marks) whose
/// letters come from scripts that look-alikes mix, with those scripts: a
/// word that is not at least "moderately restrictive" in the sense of
/// Unicode TS #39 (section 5.2), which allows one script, Latin with Han
/// and Japanese or Korean scripts, or Latin with one other recommended
/// script but Cyrillic or Greek, whose letters pass for Latin ones.
/// Characters of every script (digits, signs such as `µ`) go with any.
pub fn mixed_script_word(name: &str) -> Option<(&str, Vec<&'static str>)> {
    name.split(|c: char| !(c.is_alphanumeric() || is_mark(c)))
        .filter(|word| !word.is_empty() && !word.is_ascii())
        .find(|word| !moderately_restrictive(word))
        .map(|word| {
            let mut scripts: Vec<&'static str> = Vec::new();
            for script in word.chars().map(|c| c.script()) {
                if !matches!(script, Script::Common | Script::Inherited | Script::Unknown)
                    && !scripts.contains(&script.full_name())
                {
                    scripts.push(script.full_name());
                }
            }
            scripts.sort_unstable();
            (word, scripts)
        })
}

fn is_mark(c: char) -> bool {
    matches!(
        c.general_category(),
        GeneralCategory::NonspacingMark | GeneralCategory::SpacingMark | GeneralCategory::EnclosingMark
    )
}

/// UTS #39's restriction levels up to "moderately restrictive", as
/// `unicode_security::RestrictionLevelDetection` works them out, without
/// its check that every character is allowed in programming identifiers
/// (product names hold `+`, `®` and mathematical letters).
fn moderately_restrictive(word: &str) -> bool {
    let mut all = AugmentedScriptSet::default();
    let mut beside_latin = AugmentedScriptSet::default();
    for c in word.chars() {
        let scripts = AugmentedScriptSet::for_char(c);
        all.intersect_with(scripts);
        if !scripts.base.contains_script(Script::Latin) {
            beside_latin.intersect_with(scripts);
        }
    }
    if !all.is_empty() || beside_latin.kore || beside_latin.hanb || beside_latin.jpan {
        return true;
    }
    let mut others = beside_latin.base.iter();
    match (others.next(), others.next()) {
        (Some(script), None) => script.is_recommended() && !matches!(script, Script::Cyrillic | Script::Greek),
        _ => false,
    }
}

/// `text` in Unicode normalization form KC: full-width, mathematical,
/// circled and superscript letters, ligatures and compatibility spaces
/// become the plain characters they stand for. Text already in NFKC (all
/// ASCII is) comes back unchanged.
pub fn nfkc(text: &str) -> Cow<'_, str> {
    match unicode_normalization::is_nfkc_quick(text.chars()) {
        unicode_normalization::IsNormalized::Yes => Cow::Borrowed(text),
        _ => Cow::Owned(text.nfkc().collect()),
    }
}

/// The form names are compared in: NFKC, then lowercase; `ＯｐｅｎＳＳＬ`,
/// `𝐨𝐩𝐞𝐧𝐬𝐬𝐥` and `OpenSSL` are all `openssl`.
pub fn match_key(name: &str) -> String {
    nfkc(name.trim()).to_lowercase()
}

/// The confusable skeleton (Unicode TS #39, section 4) of [`match_key`]:
/// names that look alike have the same one, whatever scripts they are
/// written in (`ѕсоре` in Cyrillic letters and `scope`).
pub fn skeleton_key(name: &str) -> String {
    unicode_security::skeleton(&match_key(name)).collect()
}

/// `text` cut to at most `max_chars` characters, the last an ellipsis
/// when anything was cut: how a report's long text is kept (a finding's
/// title at 1,024, its description at 8,192), by the importers and the host
/// alike.
pub fn cut_chars(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        None => text.to_owned(),
        Some(_) => {
            let mut kept: String = text.chars().take(max_chars.saturating_sub(1)).collect();
            kept.push('…');
            kept
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn text_is_cut_by_characters_with_an_ellipsis() {
        assert_eq!(cut_chars("héllo", 5), "héllo");
        assert_eq!(cut_chars("héllo", 4), "hél…");
        assert_eq!(cut_chars(&"é".repeat(9000), 8192).chars().count(), 8192);
        assert_eq!(cut_chars("", 0), "");
    }

    use super::*;

    #[test]
    fn format_characters_and_separators_are_refused_in_one_line_of_text() {
        for (text, what) in [
            ("open\u{200B}ssl", "U+200B (zero-width space)"),
            ("open\u{200C}ssl", "U+200C (zero-width non-joiner)"),
            ("open\u{200D}ssl", "U+200D (zero-width joiner)"),
            ("\u{FEFF}openssl", "U+FEFF (byte order mark)"),
            ("open\u{00AD}ssl", "U+00AD (soft hyphen)"),
            ("open\u{2060}ssl", "U+2060 (word joiner)"),
            ("openssl\u{E0020}\u{E006F}", "U+E0020 (tag character)"),
            ("\u{FFF9}openssl\u{FFFA}note\u{FFFB}", "U+FFF9 (interlinear annotation)"),
            ("open\u{180E}ssl", "U+180E (format character)"),
        ] {
            for form in [Form::Line, Form::Name] {
                let reason = refusal(text, form).unwrap_or_default();
                assert!(reason.contains(&format!("invisible format character {what}")), "{text:?}: {reason}");
            }
        }
        for separator in ['\u{2028}', '\u{2029}'] {
            let text = format!("openssl{separator}");
            let reason = refusal(&text, Form::Line).unwrap_or_default();
            assert!(reason.contains("line or paragraph separator"), "{reason}");
            assert_eq!(refusal(&text, Form::Name), refusal(&text, Form::Line));
            assert_eq!(refusal(&text, Form::Lines), None, "multi-line text may break lines");
        }
        assert!(refusal("open\u{202E}ssl", Form::Line).unwrap_or_default().contains("bidirectional"));
        assert!(refusal("a\u{1b}[31m", Form::Lines).unwrap_or_default().contains("control character U+001B"));
    }

    #[test]
    fn noncharacters_are_refused_everywhere() {
        for character in ['\u{FDD0}', '\u{FDEF}', '\u{FFFE}', '\u{FFFF}', '\u{1FFFE}', '\u{10FFFF}'] {
            assert!(is_noncharacter(character));
            for form in [Form::Line, Form::Lines, Form::Name] {
                let reason = refusal(&format!("a{character}b"), form).unwrap_or_default();
                assert!(reason.contains("noncharacter"), "{character:?} {form:?}: {reason}");
            }
        }
        for character in ['\u{FDCF}', '\u{FDF0}', '\u{FFFD}', '\u{1FFFD}'] {
            assert!(!is_noncharacter(character), "{character:?}");
        }
    }

    #[test]
    fn multi_line_text_keeps_line_breaks_and_joiners_but_not_hidden_text() {
        let persian = "می\u{200C}خواهم";
        let emoji = "\u{1F468}\u{200D}\u{1F4BB} and \u{26A0}\u{FE0F}";
        for text in ["line one\nline two\r\n\tindented", persian, emoji, "para\u{2029}graph"] {
            assert_eq!(refusal(text, Form::Lines), None, "{text:?}");
        }
        assert!(refusal(persian, Form::Line).is_some(), "one line of text refuses the joiner");
        assert!(refusal("hidden\u{200B}", Form::Lines).is_some());
        assert!(refusal("hidden\u{E0041}", Form::Lines).is_some());
        assert!(refusal("a\u{FEFF}", Form::Lines).is_some());
    }

    #[test]
    fn names_also_refuse_variation_selectors_and_other_invisible_characters() {
        for (text, what) in [
            ("openssl\u{FE0F}", "a variation selector"),
            ("open\u{E0100}ssl", "a variation selector"),
            ("open\u{180B}ssl", "a variation selector"),
            ("open\u{034F}ssl", "the combining grapheme joiner"),
            ("open\u{3164}ssl", "a Hangul filler"),
        ] {
            let reason = refusal(text, Form::Name).unwrap_or_default();
            assert!(reason.contains(what), "{text:?}: {reason}");
            assert_eq!(refusal(text, Form::Line), None, "{text:?}: one line of text keeps it");
        }
        for character in ['\u{FE00}', '\u{FE0F}', '\u{E0100}', '\u{E01EF}', '\u{180F}'] {
            assert!(is_variation_selector(character) && is_default_ignorable(character), "{character:?}");
        }
    }

    #[test]
    fn names_refuse_words_mixing_latin_with_cyrillic_or_greek() {
        for (name, scripts) in [
            ("\u{043E}penssl", "Cyrillic and Latin"),
            ("op\u{0435}nssl", "Cyrillic and Latin"),
            ("\u{03BF}penssl", "Greek and Latin"),
            ("libssl1.1 \u{0440}ython3", "Cyrillic and Latin"),
            ("\u{043E}\u{0440}\u{0435}n\u{0455}\u{0455}\u{04CF}", "Cyrillic and Latin"),
            // Cyrillic beside Greek passes for neither.
            ("\u{0430}\u{03B2}", "Cyrillic and Greek"),
        ] {
            let reason = refusal(name, Form::Name).unwrap_or_default();
            assert!(reason.contains(&format!("mixes the {scripts} scripts")), "{name:?}: {reason}");
            assert_eq!(refusal(name, Form::Line), None, "{name:?}");
        }
        // Real names that mix scripts by word, or Latin with scripts that
        // have no look-alikes of it, or Latin with signs of every script.
        for name in [
            "openssl",
            "libstdc++6",
            "Microsoft® Visual C++ 2015 Redistributable (x64)",
            "\u{00B5}Torrent",
            "1\u{0421}:\u{041F}\u{0440}\u{0435}\u{0434}\u{043F}\u{0440}\u{0438}\u{044F}\u{0442}\u{0438}\u{0435}",
            "\u{041A}\u{0440}\u{0438}\u{043F}\u{0442}\u{043E}\u{041F}\u{0440}\u{043E} CSP",
            "WinRAR 6.02 (64-\u{0440}\u{0430}\u{0437}\u{0440}\u{044F}\u{0434}\u{043D}\u{0430}\u{044F})",
            "Office\u{65E5}\u{672C}\u{8A9E}\u{7248}",
            "\u{30A2}\u{30C9}\u{30D3} Acrobat",
            "caf\u{00E9}",
            "ｏｐｅｎｓｓｌ",
            "𝐨𝐩𝐞𝐧𝐬𝐬𝐥",
        ] {
            assert_eq!(refusal(name, Form::Name), None, "{name:?}");
        }
    }

    #[test]
    fn names_match_in_nfkc_lowercase_and_look_alikes_by_skeleton() {
        for name in [
            "openssl",
            "OpenSSL",
            "ｏｐｅｎｓｓｌ",
            "ＯｐｅｎＳＳＬ",
            "𝐨𝐩𝐞𝐧𝐬𝐬𝐥",
            "𝗈𝗉𝖾𝗇𝗌𝗌𝗅",
            "ⓞⓟⓔⓝⓢⓢⓛ",
            " openssl\u{2028}",
        ] {
            assert_eq!(match_key(name), "openssl", "{name:?}");
        }
        assert_eq!(match_key("Java\u{2122} SE"), "javatm se");
        assert_eq!(nfkc("plain ascii"), "plain ascii");
        // Cyrillic look-alikes stay apart under NFKC; their skeletons meet.
        assert_ne!(match_key("\u{0455}\u{0441}\u{043E}\u{0440}\u{0435}"), "scope");
        assert_eq!(skeleton_key("\u{0455}\u{0441}\u{043E}\u{0440}\u{0435}"), skeleton_key("scope"));
        assert_eq!(skeleton_key("\u{043E}penssl"), skeleton_key("OpenSSL"));
        assert_ne!(skeleton_key("openssl"), skeleton_key("gnutls"));
    }
}
