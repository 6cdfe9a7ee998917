//! nginx configuration text to directives, as nginx's `ngx_conf_read_token` reads it:
//! words separated by blanks, `'...'` and `"..."` quoting, `\` escaping the next
//! character (`\t`, `\r`, `\n` in quotes being control characters), `#` comments to the end
//! of the line, `;` ending a directive and `{ ... }` a block.

/// One argument of a directive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Arg {
    /// The text, quotes and escapes resolved.
    pub text: String,
    /// Whether it was quoted (`if` conditions keep a quoted `(` as text).
    pub quoted: bool,
}

/// One directive: `name args...;` or `name args... { block }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Directive {
    /// The name as written.
    pub name: String,
    /// The arguments.
    pub args: Vec<Arg>,
    /// The block's directives, for `if (...) { ... }` and the like.
    pub block: Option<Vec<Directive>>,
    /// The line it starts on (1-based).
    pub line: usize,
    /// Its text, for the fail-closed check of a refused one.
    pub text: String,
}

/// Reads a snippet; `Err` names the line and what is wrong (nginx would refuse to load
/// such a configuration).
pub(crate) fn parse(text: &str) -> Result<Vec<Directive>, String> {
    let mut reader = Reader {
        text,
        bytes: text.as_bytes(),
        at: 0,
        line: 1,
    };
    let directives = reader.block(0)?;
    Ok(directives)
}

struct Reader<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
    line: usize,
}

/// What ended a directive's words.
enum End {
    Semicolon,
    Open,
    Close,
    Eof,
}

/// Blocks nest at most this deep (bounded recursion on hostile input).
const MAX_DEPTH: usize = 8;

impl Reader<'_> {
    fn block(&mut self, depth: usize) -> Result<Vec<Directive>, String> {
        if depth > MAX_DEPTH {
            return Err(format!("line {}: blocks nested too deep", self.line));
        }
        let mut out = Vec::new();
        loop {
            self.skip_blank();
            let start = self.at;
            let line = self.line;
            let (words, end) = self.words()?;
            match end {
                End::Eof if words.is_empty() => {
                    if depth > 0 {
                        return Err(format!(
                            "line {}: unexpected end, \"}}\" missing",
                            self.line
                        ));
                    }
                    return Ok(out);
                }
                End::Eof => {
                    return Err(format!("line {line}: directive without \";\" at the end"));
                }
                End::Close if words.is_empty() => {
                    if depth == 0 {
                        return Err(format!("line {}: unexpected \"}}\"", self.line));
                    }
                    return Ok(out);
                }
                End::Close => {
                    return Err(format!(
                        "line {line}: directive without \";\" before \"}}\""
                    ));
                }
                End::Semicolon if words.is_empty() => {
                    return Err(format!("line {line}: unexpected \";\""));
                }
                End::Open if words.is_empty() => {
                    return Err(format!("line {line}: unexpected \"{{\""));
                }
                End::Semicolon | End::Open => {}
            }
            let block = match end {
                End::Open => Some(self.block(depth + 1)?),
                _ => None,
            };
            let mut words = words.into_iter();
            let name = words.next().map(|w| w.text).unwrap_or_default();
            out.push(Directive {
                name,
                args: words.collect(),
                block,
                line,
                text: self.text[start..self.at].to_owned(),
            });
        }
    }

    /// Skips blanks and comments.
    fn skip_blank(&mut self) {
        while let Some(&b) = self.bytes.get(self.at) {
            match b {
                b'\n' => {
                    self.line += 1;
                    self.at += 1;
                }
                b' ' | b'\t' | b'\r' => self.at += 1,
                b'#' => {
                    while let Some(&b) = self.bytes.get(self.at) {
                        if b == b'\n' {
                            break;
                        }
                        self.at += 1;
                    }
                }
                _ => break,
            }
        }
    }

    /// The words of one directive and what ended them.
    fn words(&mut self) -> Result<(Vec<Arg>, End), String> {
        let mut words = Vec::new();
        loop {
            self.skip_blank();
            let Some(&b) = self.bytes.get(self.at) else {
                return Ok((words, End::Eof));
            };
            match b {
                b';' => {
                    self.at += 1;
                    return Ok((words, End::Semicolon));
                }
                b'{' => {
                    self.at += 1;
                    return Ok((words, End::Open));
                }
                b'}' => {
                    // Left for the enclosing block to consume.
                    if words.is_empty() {
                        self.at += 1;
                    }
                    return Ok((words, End::Close));
                }
                b'"' | b'\'' => words.push(self.quoted(b)?),
                _ => words.push(self.bare()?),
            }
        }
    }

    fn quoted(&mut self, quote: u8) -> Result<Arg, String> {
        let line = self.line;
        self.at += 1;
        let mut text = Vec::new();
        loop {
            let Some(&b) = self.bytes.get(self.at) else {
                return Err(format!("line {line}: unclosed {} quote", quote as char));
            };
            self.at += 1;
            match b {
                b'\\' => {
                    let Some(&next) = self.bytes.get(self.at) else {
                        return Err(format!("line {line}: unclosed {} quote", quote as char));
                    };
                    self.at += 1;
                    match next {
                        b'"' | b'\'' | b'\\' => text.push(next),
                        b't' => text.push(b'\t'),
                        b'r' => text.push(b'\r'),
                        b'n' => text.push(b'\n'),
                        // nginx keeps other escapes as written.
                        other => {
                            text.push(b'\\');
                            text.push(other);
                        }
                    }
                    if next == b'\n' {
                        self.line += 1;
                    }
                }
                b'\n' => {
                    self.line += 1;
                    text.push(b);
                }
                _ if b == quote => break,
                _ => text.push(b),
            }
        }
        // nginx: a quoted word must be followed by a blank or an end.
        if let Some(&b) = self.bytes.get(self.at)
            && !matches!(b, b' ' | b'\t' | b'\r' | b'\n' | b';' | b'{' | b'}' | b')')
        {
            return Err(format!(
                "line {}: unexpected \"{}\" after a quoted word",
                self.line, b as char
            ));
        }
        Ok(Arg {
            text: String::from_utf8_lossy(&text).into_owned(),
            quoted: true,
        })
    }

    fn bare(&mut self) -> Result<Arg, String> {
        let mut text = Vec::new();
        while let Some(&b) = self.bytes.get(self.at) {
            match b {
                b' ' | b'\t' | b'\r' | b'\n' | b';' | b'{' => break,
                // `}` ends a word only where nginx's variable syntax does not use it.
                b'}' if !text.contains(&b'{') => break,
                b'\\' => {
                    self.at += 1;
                    if let Some(&next) = self.bytes.get(self.at) {
                        text.push(next);
                        self.at += 1;
                    }
                }
                b'$' if self.bytes.get(self.at + 1) == Some(&b'{') => {
                    // `${name}`: read through its closing brace.
                    let close = self.text[self.at..]
                        .find('}')
                        .ok_or_else(|| format!("line {}: unclosed \"${{\"", self.line))?;
                    text.extend_from_slice(&self.bytes[self.at..=self.at + close]);
                    self.at += close + 1;
                }
                _ => {
                    text.push(b);
                    self.at += 1;
                }
            }
        }
        Ok(Arg {
            text: String::from_utf8_lossy(&text).into_owned(),
            quoted: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(d: &Directive) -> Vec<&str> {
        d.args.iter().map(|a| a.text.as_str()).collect()
    }

    #[test]
    fn directives_arguments_and_lines() {
        let parsed = parse("more_set_headers 'A: 1' \"B: 2\";\n# comment; deny all;\n  add_header X y always; # trailing\n").unwrap();
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[0].name, "more_set_headers");
        assert_eq!(words(&parsed[0]), ["A: 1", "B: 2"]);
        assert_eq!(parsed[0].line, 1);
        assert_eq!(parsed[1].name, "add_header");
        assert_eq!(words(&parsed[1]), ["X", "y", "always"]);
        assert_eq!(parsed[1].line, 3);
    }

    #[test]
    fn escapes_in_and_out_of_quotes_as_nginx() {
        let parsed =
            parse(r#"a "q\"uote" 'it\'s' "tab\there" bare\;semi "back\\slash" "\d";"#).unwrap();
        assert_eq!(
            words(&parsed[0]),
            [
                "q\"uote",
                "it's",
                "tab\there",
                "bare;semi",
                "back\\slash",
                "\\d"
            ]
        );
    }

    #[test]
    fn if_blocks_and_variables_in_braces() {
        let parsed = parse(
            "if ($http_x ~* \"^a(b)\") {\n  return 301 https://x${uri}y;\n}\nmore_set_headers \"Z: 1\";",
        )
        .unwrap();
        assert_eq!(parsed[0].name, "if");
        assert_eq!(words(&parsed[0]), ["($http_x", "~*", "^a(b)", ")"]);
        let block = parsed[0].block.as_ref().unwrap();
        assert_eq!(block[0].name, "return");
        assert_eq!(words(&block[0]), ["301", "https://x${uri}y"]);
        assert_eq!(block[0].line, 2);
        assert_eq!(parsed[1].line, 4);
        assert!(parsed[0].text.starts_with("if ($http_x"));
        assert!(parsed[0].text.ends_with('}'));
    }

    #[test]
    fn bad_input_names_the_line() {
        for (text, want) in [
            ("a b", "line 1: directive without \";\""),
            ("a 'b;", "line 1: unclosed ' quote"),
            ("\n}", "line 2: unexpected \"}\""),
            ("if ($a) { return 200;", "unexpected end"),
            ("a \"b\"c;", "after a quoted word"),
            (";", "unexpected \";\""),
            ("x { y }", "without \";\" before"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(want), "{text:?}: {error}");
        }
        let deep = "if (a) {".repeat(20) + &"}".repeat(20);
        assert!(parse(&deep).unwrap_err().contains("too deep"));
    }

    #[test]
    fn empty_and_comment_only_snippets_have_no_directives() {
        assert!(parse("").unwrap().is_empty());
        assert!(parse("  # abc { }\n").unwrap().is_empty());
    }
}
