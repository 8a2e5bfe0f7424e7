//! Destination templates of forwarding routes: text with `{topic}`, `{subtopic}`
//! and `{id}` placeholders. Parsed here so that the configuration, which checks a
//! route when it is loaded, and the forwarder, which expands it for every job,
//! read a template the same way.

/// A piece of a parsed template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TemplatePart {
    /// Fixed text.
    Literal(String),
    /// The job's topic.
    Topic,
    /// The job's subtopic (empty for a job without one).
    Subtopic,
    /// The job's id.
    Id,
}

/// Parses `template` into its parts, in order.
///
/// # Errors
/// Why the template is malformed: an unbalanced brace or an unknown placeholder.
pub fn parse_template(template: &str) -> Result<Vec<TemplatePart>, String> {
    let unopened = || format!("{template:?} has a '}}' without '{{'");
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some((literal, after_open)) = rest.split_once('{') {
        if literal.contains('}') {
            return Err(unopened());
        }
        if !literal.is_empty() {
            parts.push(TemplatePart::Literal(literal.to_owned()));
        }
        let Some((name, after_close)) = after_open.split_once('}') else {
            return Err(format!("{template:?} has a '{{' without '}}'"));
        };
        parts.push(match name {
            "topic" => TemplatePart::Topic,
            "subtopic" => TemplatePart::Subtopic,
            "id" => TemplatePart::Id,
            other => return Err(format!("{template:?} uses {{{other}}}; only {{topic}} {{subtopic}} {{id}} expand")),
        });
        rest = after_close;
    }
    if rest.contains('}') {
        return Err(unopened());
    }
    if !rest.is_empty() {
        parts.push(TemplatePart::Literal(rest.to_owned()));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_and_text_come_apart_in_order() {
        let parts = parse_template("delay.{topic}.{subtopic}-{id}").expect("parses");
        assert_eq!(
            parts,
            vec![
                TemplatePart::Literal("delay.".to_owned()),
                TemplatePart::Topic,
                TemplatePart::Literal(".".to_owned()),
                TemplatePart::Subtopic,
                TemplatePart::Literal("-".to_owned()),
                TemplatePart::Id,
            ]
        );
        assert_eq!(parse_template("fixed").expect("parses"), vec![TemplatePart::Literal("fixed".to_owned())]);
    }

    #[test]
    fn malformed_templates_say_why() {
        for (template, reason) in
            [("a}b", "without '{'"), ("a{topic", "without '}'"), ("{topic}}", "without '{'"), ("{body}", "uses {body}")]
        {
            let error = parse_template(template).err().unwrap_or_default();
            assert!(error.contains(reason), "{template}: {error}");
        }
    }
}
