//! Just enough of SQL expression text to check it without a SQL engine:
//! a tokenizer, the columns an expression references, and whether it uses a
//! window function (`... OVER (...)`). The engine parses the full SQL with
//! DataFusion; this is what the compile-time checks can see.

/// A token of SQL expression text.
#[derive(Debug, Clone, PartialEq)]
pub enum Token {
    /// An identifier (a column, function or keyword); quoted identifiers unquoted.
    Ident(String),
    /// A quoted string literal's contents.
    Str(String),
    /// A numeric literal.
    Number(String),
    /// An operator or punctuation.
    Symbol(String),
}

/// Splits SQL expression text into tokens. Unknown characters become symbols.
pub fn tokenize(sql: &str) -> Vec<Token> {
    let chars: Vec<char> = sql.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_alphabetic() || c == '_' {
            let s = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(chars[s..i].iter().collect()));
        } else if c.is_ascii_digit() {
            let s = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            out.push(Token::Number(chars[s..i].iter().collect()));
        } else if c == '\'' || c == '"' || c == '`' {
            let q = c;
            i += 1;
            let mut s = String::new();
            while i < chars.len() {
                if chars[i] == q {
                    if i + 1 < chars.len() && chars[i + 1] == q {
                        s.push(q);
                        i += 2;
                        continue;
                    }
                    break;
                }
                s.push(chars[i]);
                i += 1;
            }
            i += 1;
            if q == '\'' {
                out.push(Token::Str(s));
            } else {
                out.push(Token::Ident(s));
            }
        } else {
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            if ["<=", ">=", "<>", "!=", "==", "||"].contains(&two.as_str()) {
                out.push(Token::Symbol(two));
                i += 2;
            } else {
                out.push(Token::Symbol(c.to_string()));
                i += 1;
            }
        }
    }
    out
}

const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "not",
    "is",
    "null",
    "true",
    "false",
    "interval",
    "cast",
    "as",
    "like",
    "ilike",
    "in",
    "between",
    "case",
    "when",
    "then",
    "else",
    "end",
    "distinct",
    "over",
    "partition",
    "by",
    "order",
    "asc",
    "desc",
    "nulls",
    "first",
    "last",
    "rows",
    "range",
    "unbounded",
    "preceding",
    "following",
    "current",
    "row",
    "date",
    "timestamp",
    "escape",
    "similar",
    "to",
];

/// The column names an expression references, in order of first use.
/// Function names, keywords, type names after `AS` and qualifiers (`t.` in
/// `t.col`) are skipped; a qualified reference yields its column part.
pub fn referenced_columns(sql: &str) -> Vec<String> {
    let toks = tokenize(sql);
    let mut out: Vec<String> = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        let Token::Ident(name) = t else { continue };
        let next = toks.get(i + 1);
        let prev = if i > 0 { toks.get(i - 1) } else { None };
        let is_call = matches!(next, Some(Token::Symbol(s)) if s == "(");
        let is_qualifier = matches!(next, Some(Token::Symbol(s)) if s == ".");
        let after_as = matches!(prev, Some(Token::Ident(p)) if p.eq_ignore_ascii_case("as"));
        let after_interval_unit = matches!(prev, Some(Token::Str(_)))
            && matches!(toks.get(i.wrapping_sub(2)), Some(Token::Ident(p)) if p.eq_ignore_ascii_case("interval"));
        if is_call
            || is_qualifier
            || after_as
            || after_interval_unit
            || KEYWORDS.contains(&name.to_ascii_lowercase().as_str())
        {
            continue;
        }
        if !out.contains(name) {
            out.push(name.clone());
        }
    }
    out
}

/// If the expression calls a window function (`f(...) OVER (...)`), the
/// function call's text in upper case (`ROW_NUMBER()`) and the window
/// specification's text.
pub fn window_function(sql: &str) -> Option<(String, String)> {
    let lower = sql.to_ascii_lowercase();
    let over = find_word(&lower, "over")?;
    let call = sql[..over].trim();
    let spec = sql[over + 4..].trim();
    let spec = spec
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .unwrap_or(spec)
        .trim();
    Some((call.to_ascii_uppercase(), spec.to_string()))
}

/// True when the expression reads the current time (`current_timestamp()`,
/// `now()`, `current_date()`, `localtimestamp()`; with or without
/// parentheses where SQL allows that).
pub fn uses_current_time(sql: &str) -> bool {
    let toks = tokenize(sql);
    toks.iter().enumerate().any(|(i, t)| {
        let Token::Ident(name) = t else { return false };
        let call = matches!(toks.get(i + 1), Some(Token::Symbol(s)) if s == "(");
        match name.to_ascii_lowercase().as_str() {
            "current_timestamp" | "current_date" | "localtimestamp" => true,
            "now" => call,
            _ => false,
        }
    })
}

fn find_word(haystack: &str, word: &str) -> Option<usize> {
    let bytes = haystack.as_bytes();
    let mut from = 0;
    while let Some(p) = haystack[from..].find(word) {
        let at = from + p;
        let before = at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
        let end = at + word.len();
        let after =
            end >= bytes.len() || !(bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_');
        if before && after {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

/// The top-level `AND` conjuncts of a condition, as text.
pub fn conjuncts(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for tok in sql.split_inclusive(|c: char| c.is_whitespace() || c == '(' || c == ')') {
        let word = tok.trim_end_matches(|c: char| c.is_whitespace());
        for ch in tok.chars() {
            match ch {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
        }
        if depth == 0 && word.eq_ignore_ascii_case("and") {
            out.push(cur.trim().to_string());
            cur.clear();
        } else {
            cur.push_str(tok);
        }
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// The comparison operator of a conjunct (`=`, `<`, `<=`, `>`, `>=`), if any
/// stands at its top level.
pub fn comparison_op(conjunct: &str) -> Option<String> {
    let mut depth = 0;
    for t in tokenize(conjunct) {
        if let Token::Symbol(s) = &t {
            match s.as_str() {
                "(" => depth += 1,
                ")" => depth -= 1,
                "=" | "==" | "<" | "<=" | ">" | ">=" if depth == 0 => return Some(s.clone()),
                _ => {}
            }
        }
        if let Token::Ident(w) = &t {
            if depth == 0 && w.eq_ignore_ascii_case("between") {
                return Some("between".into());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_columns_but_not_functions_or_keywords() {
        assert_eq!(referenced_columns("value % 2 = 1"), vec!["value"]);
        assert_eq!(referenced_columns("hour(ts)"), vec!["ts"]);
        assert_eq!(
            referenced_columns("click_ts <= imp_ts + INTERVAL '15 minutes'"),
            vec!["click_ts", "imp_ts"]
        );
        assert_eq!(referenced_columns("CAST(v AS BIGINT) > 0"), vec!["v"]);
        assert_eq!(referenced_columns("side = 'imp'"), vec!["side"]);
        assert_eq!(referenced_columns("c.user_id = p.user_id"), vec!["user_id"]);
    }

    #[test]
    fn detects_window_functions() {
        let (call, spec) =
            window_function("row_number() OVER (PARTITION BY key ORDER BY ts)").unwrap();
        assert_eq!(call, "ROW_NUMBER()");
        assert_eq!(spec, "PARTITION BY key ORDER BY ts");
        assert!(window_function("value + 1").is_none());
        assert!(window_function("overflow + 1").is_none());
    }

    #[test]
    fn detects_current_time() {
        assert!(uses_current_time("ts > now() - INTERVAL '1 minute'"));
        assert!(uses_current_time("CURRENT_TIMESTAMP"));
        assert!(uses_current_time("current_date() = d"));
        assert!(!uses_current_time("now > 1"));
        assert!(!uses_current_time("'now()' = s"));
    }

    #[test]
    fn splits_conjuncts() {
        let c = conjuncts("a = b AND (x > 1 AND y < 2) and c >= d");
        assert_eq!(c, vec!["a = b", "(x > 1 AND y < 2)", "c >= d"]);
        assert_eq!(comparison_op("c >= d").as_deref(), Some(">="));
        assert_eq!(comparison_op("a = b").as_deref(), Some("="));
    }
}
