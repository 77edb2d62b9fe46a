//! Effect-key templates: literal text and `{name}` placeholders (docs/spec.md §7).
//!
//! `name` is an identifier (Unicode allowed: XID_Start or `_`, then XID_Continue). There are no
//! escapes, format specs, attribute or index access, and no empty `{}`; any stray brace is an
//! error naming the template, the character and its position (0-based, in characters).

use crate::error::{Error, Result};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    Literal(String),
    /// Index into [`Template::placeholders`].
    Placeholder(usize),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    source: String,
    segments: Vec<Segment>,
    /// Distinct placeholder names, in order of first appearance.
    placeholders: Vec<String>,
}

impl Template {
    pub fn parse(source: &str) -> Result<Template> {
        if source.is_empty() {
            return Err(Error::InvalidArgument(
                "effect template must not be empty".into(),
            ));
        }
        let bad = |pos: usize, ch: char, why: &str| {
            Error::InvalidArgument(format!(
                "effect template {source:?}: {why} ({ch:?} at position {pos})"
            ))
        };
        let mut segments = Vec::new();
        let mut placeholders: Vec<String> = Vec::new();
        let mut literal = String::new();
        let mut chars = source.chars().enumerate().peekable();
        while let Some((pos, ch)) = chars.next() {
            match ch {
                '}' => return Err(bad(pos, ch, "closing brace without an opening one")),
                '{' => {
                    let mut name = String::new();
                    let mut closed = false;
                    for (p, c) in chars.by_ref() {
                        if c == '}' {
                            closed = true;
                            break;
                        }
                        let ok = if name.is_empty() {
                            c == '_' || unicode_ident::is_xid_start(c)
                        } else {
                            unicode_ident::is_xid_continue(c)
                        };
                        if !ok {
                            let why = match c {
                                '{' => "a brace inside a placeholder (no '{{' escapes)",
                                ':' | '!' => "format specs and conversions are not supported",
                                '.' | '[' => "attribute and index access are not supported",
                                _ => "a placeholder must be an identifier",
                            };
                            return Err(bad(p, c, why));
                        }
                        name.push(c);
                    }
                    if !closed {
                        return Err(bad(pos, ch, "opening brace is never closed"));
                    }
                    if name.is_empty() {
                        return Err(bad(pos, ch, "empty placeholder '{}'"));
                    }
                    if !literal.is_empty() {
                        segments.push(Segment::Literal(std::mem::take(&mut literal)));
                    }
                    let idx = match placeholders.iter().position(|n| *n == name) {
                        Some(i) => i,
                        None => {
                            placeholders.push(name);
                            placeholders.len() - 1
                        }
                    };
                    segments.push(Segment::Placeholder(idx));
                }
                _ => literal.push(ch),
            }
        }
        if !literal.is_empty() {
            segments.push(Segment::Literal(literal));
        }
        Ok(Template {
            source: source.to_owned(),
            segments,
            placeholders,
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Distinct placeholder names in order of first appearance.
    pub fn placeholders(&self) -> &[String] {
        &self.placeholders
    }

    /// Render with one value per placeholder, in [`Template::placeholders`] order.
    /// Values are already text: the binding decides which argument types are acceptable.
    pub fn render<S: AsRef<str>>(&self, values: &[S]) -> Result<String> {
        if values.len() != self.placeholders.len() {
            return Err(Error::EffectKey(format!(
                "effect template {:?} needs {} value(s) ({}), got {}",
                self.source,
                self.placeholders.len(),
                self.placeholders.join(", "),
                values.len()
            )));
        }
        for (name, v) in self.placeholders.iter().zip(values) {
            if v.as_ref().is_empty() {
                return Err(Error::EffectKey(format!(
                    "effect template {:?}: placeholder '{name}' rendered as an empty string",
                    self.source
                )));
            }
        }
        let mut out = String::with_capacity(self.source.len() + 16);
        for seg in &self.segments {
            match seg {
                Segment::Literal(s) => out.push_str(s),
                Segment::Placeholder(i) => out.push_str(values[*i].as_ref()),
            }
        }
        Ok(out)
    }
}
