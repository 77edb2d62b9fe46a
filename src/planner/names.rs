//! People's names as the approval rules see them: the form in which two names are the same
//! person ([`name_key`]) and what a name may not hold ([`check_name`]). A name is stored as it
//! was typed (it is what people are shown); only comparisons use its key.

use caseless::Caseless;
use unicode_normalization::UnicodeNormalization;
use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

use super::rules::breaks_a_line;
use crate::error::{Error, Result};

/// The longest name, in characters.
pub const MAX_NAME_CHARS: usize = 200;

/// How the refusals say names are compared.
pub(crate) const COMPARED: &str =
    "names are compared as people mean them: Unicode NFKC, case-folded, without spaces at \
     either end";

/// The form in which two names are the same person: Unicode NFKC, full case folding (`ß` is
/// `ss`, `Σ` and `ς` are `σ`), NFKC again, and the white space at either end removed.
/// `Refund-Agent`, `refund-agent ` and the fullwidth `ｒｅｆｕｎｄ-agent` are all
/// `refund-agent`.
///
/// It is Python's `unicodedata.normalize("NFKC", s).casefold().strip()` with one more NFKC
/// after the folding: folding can leave a letter decomposed (`ΐ` folds to `ι`, U+0308,
/// U+0301), which would then differ from the same letter typed precomposed in another case
/// (`Ϊ́`). Normalising again makes such spellings one key; two names that the Python form
/// makes equal stay equal.
pub fn name_key(name: &str) -> String {
    let key: String = name.nfkc().default_case_fold().nfkc().collect();
    key.trim().to_owned()
}

/// Whether the names `a` and `b` are the same person ([`name_key`]).
pub fn same_person(a: &str, b: &str) -> bool {
    a == b || name_key(a) == name_key(b)
}

/// What `c` is, when a name may not hold it: a control character (Unicode `Cc`), a
/// bidirectional control (which reorders what follows it on screen), a line or paragraph
/// separator, or an invisible format character (Unicode `Cf`: the zero-width space, joiner
/// and non-joiner, the word joiner, the byte order mark, the soft hyphen, the tag characters,
/// and whatever else one line of text refuses). Each can make one name read as another, or
/// hide part of it.
fn refused(c: char) -> Option<&'static str> {
    if c.is_control() {
        Some("a control character")
    } else if matches!(
        c,
        '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
    ) {
        Some("a bidirectional control")
    } else if matches!(c, '\u{2028}' | '\u{2029}') {
        Some("a line or paragraph separator")
    } else if c.general_category() == GeneralCategory::Format || breaks_a_line(c) {
        Some("an invisible format character")
    } else {
        None
    }
}

/// `name` in double quotes, each character a name may not hold written as its code point
/// (`\u{202E}`), never as itself; cut after 60 characters.
fn shown(name: &str) -> String {
    let mut out = String::from("\"");
    for (i, c) in name.chars().enumerate() {
        if i == 60 {
            out.push('…');
            break;
        }
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if refused(c).is_some() => out.push_str(&format!("\\u{{{:04X}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Refuse `name` as `what` (`requested_by`, `the decider (--by)`, `an approver's name`)
/// unless it names someone the way it reads: no character [`refused`] names, not empty once
/// normalised ([`name_key`]), and at most [`MAX_NAME_CHARS`] characters. A refusal names the
/// first bad character by its code point and never shows it raw.
pub fn check_name(what: &str, name: &str) -> Result<()> {
    let bad = name
        .chars()
        .enumerate()
        .find_map(|(i, c)| refused(c).map(|kind| (i + 1, c, kind)));
    if let Some((at, c, kind)) = bad {
        return Err(Error::InvalidArgument(format!(
            "{what} {} holds U+{:04X} ({kind}) at character {at}, which can make a name read as \
             another or hide part of it; nothing was written (type the name without it)",
            shown(name),
            c as u32
        )));
    }
    if name_key(name).is_empty() {
        return Err(Error::InvalidArgument(format!(
            "{what} is empty (or only spaces); nothing was written (give the name of a person \
             or agent)"
        )));
    }
    let count = name.chars().count();
    if count > MAX_NAME_CHARS {
        return Err(Error::InvalidArgument(format!(
            "{what} is {count} characters long, and a name is at most {MAX_NAME_CHARS}; \
             nothing was written"
        )));
    }
    Ok(())
}
