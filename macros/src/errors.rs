//! Collecting every error before failing, as serde_derive's `Ctxt` does: the
//! user sees all mistakes of a declaration in one compile.

use std::fmt::Display;

use proc_macro2::TokenStream;
use quote::ToTokens;
pub use weir_plan::resolve::did_you_mean;

/// One compile error: the tokens it points at and what it says.
pub struct Diagnostic {
    /// The text of the tokens the error points at (tests assert on it).
    pub at: String,
    /// The message, with its `help:` line when there is one.
    pub message: String,
    error: syn::Error,
}

impl std::fmt::Debug for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at `{}`: {}", self.at, self.message)
    }
}

/// The errors found so far.
#[derive(Default, Debug)]
pub struct Errors {
    diags: Vec<Diagnostic>,
}

impl Errors {
    /// No errors yet.
    pub fn new() -> Errors {
        Errors::default()
    }

    /// An error pointing at `tokens`.
    pub fn spanned(&mut self, tokens: impl ToTokens, message: impl Display) {
        let tokens = tokens.into_token_stream();
        let message = message.to_string();
        self.diags.push(Diagnostic {
            at: tokens.to_string(),
            error: syn::Error::new_spanned(tokens, &message),
            message,
        });
    }

    /// An error pointing at `tokens`, with a `help:` line.
    pub fn spanned_help(
        &mut self,
        tokens: impl ToTokens,
        message: impl Display,
        help: impl Display,
    ) {
        self.spanned(
            tokens,
            with_help(&message.to_string(), Some(&help.to_string())),
        );
    }

    /// A syntax error from syn (it carries its own span).
    pub fn syn(&mut self, error: syn::Error) {
        for e in error {
            self.diags.push(Diagnostic {
                at: String::new(),
                message: e.to_string(),
                error: e,
            });
        }
    }

    /// True when nothing went wrong.
    pub fn is_empty(&self) -> bool {
        self.diags.is_empty()
    }

    /// How many errors there are.
    pub fn len(&self) -> usize {
        self.diags.len()
    }

    /// The errors, in the order they were found.
    #[cfg(test)]
    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.diags
    }

    /// All errors as `compile_error!` invocations (and nothing else).
    pub fn into_compile_errors(self) -> TokenStream {
        let mut all: Option<syn::Error> = None;
        for d in self.diags {
            match &mut all {
                None => all = Some(d.error),
                Some(a) => a.combine(d.error),
            }
        }
        all.map(|e| e.to_compile_error()).unwrap_or_default()
    }
}

/// A message with an optional `help:` line under it (rustc prints it verbatim).
pub fn with_help(message: &str, help: Option<&str>) -> String {
    match help {
        Some(h) => format!("{message}\nhelp: {h}"),
        None => message.to_string(),
    }
}

/// "unknown X `name`" help: a suggestion when one is close, and the list.
pub fn suggestion_help(name: &str, candidates: &[&str], what: &str) -> String {
    let list = candidates.join(", ");
    match did_you_mean(name, candidates) {
        Some(s) => format!("did you mean `{s}`? ({what}: {list})"),
        None => format!("{what}: {list}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collects_errors_with_help_lines() {
        let mut errs = Errors::new();
        let tok: syn::Ident = syn::parse_quote!(vaule);
        errs.spanned_help(&tok, "unknown column `vaule`", "did you mean `value`?");
        errs.spanned(&tok, "second");
        assert_eq!(errs.len(), 2);
        assert_eq!(errs.diagnostics()[0].at, "vaule");
        assert_eq!(
            errs.diagnostics()[0].message,
            "unknown column `vaule`\nhelp: did you mean `value`?"
        );
        let out = errs.into_compile_errors().to_string();
        assert_eq!(out.matches("compile_error").count(), 2);
    }

    #[test]
    fn suggests_close_names_only() {
        let keys = ["source", "sink", "schema", "filter"];
        assert_eq!(did_you_mean("sorce", &keys), Some("source"));
        assert_eq!(did_you_mean("fliter", &keys), Some("filter"));
        assert_eq!(did_you_mean("output", &keys), None);
        // A name typed short of a longer one suggests the longer one.
        let cols = ["imp_ad_id", "imp_ts", "ad_id"];
        assert_eq!(did_you_mean("imp_ad", &cols), Some("imp_ad_id"));
        assert_eq!(did_you_mean("IMP_TS", &cols), Some("imp_ts"));
    }
}
