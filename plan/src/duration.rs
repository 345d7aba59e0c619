//! Durations written the way Spark writes them: `"10 minutes"`, `"1 hour"`,
//! `"500 milliseconds"`, `"1 minute 30 seconds"`, `"interval 2 days"`.

/// Why a duration string did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DurationError {
    /// Nothing was given.
    Empty,
    /// A number was expected where this token stands.
    NotANumber(String),
    /// The unit is not one of the known ones.
    UnknownUnit(String),
    /// A number had no unit after it.
    MissingUnit(String),
    /// The duration is zero or negative where a positive one is needed.
    NotPositive,
    /// The duration is negative (where zero is allowed).
    Negative,
}

impl std::fmt::Display for DurationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DurationError::Empty => write!(f, "the duration is empty"),
            DurationError::NotANumber(t) => write!(f, "expected a number, found `{t}`"),
            DurationError::UnknownUnit(u) => write!(
                f,
                "unknown time unit `{u}` (use milliseconds, seconds, minutes, hours, days or weeks)"
            ),
            DurationError::MissingUnit(n) => write!(f, "`{n}` has no time unit after it"),
            DurationError::NotPositive => write!(f, "the duration must be greater than zero"),
            DurationError::Negative => write!(f, "the duration must not be negative"),
        }
    }
}

impl std::error::Error for DurationError {}

fn unit_ms(unit: &str) -> Option<i64> {
    Some(match unit.to_ascii_lowercase().as_str() {
        "ms" | "millisecond" | "milliseconds" | "msec" | "msecs" => 1,
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000,
        "h" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        "w" | "week" | "weeks" => 7 * 86_400_000,
        _ => return None,
    })
}

/// Parses a duration into milliseconds. Zero is allowed here (a watermark
/// delay of `"0 seconds"` is valid); use [`parse_positive_duration_ms`] where
/// it is not.
pub fn parse_duration_ms(s: &str) -> Result<i64, DurationError> {
    let mut words: Vec<String> = Vec::new();
    for w in s.split_whitespace() {
        // split "10s" / "5minutes" into number and unit
        let split = w.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'));
        match split {
            Some(i) if i > 0 => {
                words.push(w[..i].to_string());
                words.push(w[i..].to_string());
            }
            _ => words.push(w.to_string()),
        }
    }
    if words
        .first()
        .is_some_and(|w| w.eq_ignore_ascii_case("interval"))
    {
        words.remove(0);
    }
    if words.is_empty() {
        return Err(DurationError::Empty);
    }
    let mut total: i64 = 0;
    let mut it = words.into_iter();
    while let Some(num) = it.next() {
        let n: f64 = num
            .parse()
            .map_err(|_| DurationError::NotANumber(num.clone()))?;
        let unit = it
            .next()
            .ok_or_else(|| DurationError::MissingUnit(num.clone()))?;
        let ms = unit_ms(&unit).ok_or(DurationError::UnknownUnit(unit))?;
        total += (n * ms as f64).round() as i64;
    }
    if total < 0 {
        return Err(DurationError::Negative);
    }
    Ok(total)
}

/// Parses a duration that must be greater than zero (window sizes, slides,
/// trigger intervals, session gaps).
pub fn parse_positive_duration_ms(s: &str) -> Result<i64, DurationError> {
    match parse_duration_ms(s) {
        Ok(0) | Err(DurationError::Negative) => Err(DurationError::NotPositive),
        other => other,
    }
}

/// A duration in the plan: the text as written (what the plan format and
/// messages show) and its length, read once.
#[derive(Clone, PartialEq, Eq)]
pub struct Duration {
    text: String,
    /// The length, when the text parses (an error is read again on demand:
    /// it is rare, and keeping it would double the plan's size).
    ms: Option<i64>,
}

impl Duration {
    /// Reads a duration; text that does not parse is kept, and its error
    /// is what [`Duration::ms`] returns (the plan's rules report it).
    pub fn read(text: &str) -> Duration {
        Duration {
            text: text.to_string(),
            ms: parse_duration_ms(text).ok(),
        }
    }

    /// The text as written (`"10 minutes"`).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// True when nothing was written (a session window has no size).
    pub fn is_empty(&self) -> bool {
        self.text.trim().is_empty()
    }

    /// Its length in milliseconds; zero allowed.
    pub fn ms(&self) -> Result<i64, DurationError> {
        match self.ms {
            Some(ms) => Ok(ms),
            None => parse_duration_ms(&self.text),
        }
    }

    /// Its length in milliseconds, which must be greater than zero.
    pub fn positive_ms(&self) -> Result<i64, DurationError> {
        match self.ms() {
            Ok(0) | Err(DurationError::Negative) => Err(DurationError::NotPositive),
            other => other,
        }
    }
}

impl Default for Duration {
    fn default() -> Duration {
        Duration::read("")
    }
}

impl std::fmt::Display for Duration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// Debug-printed as its text in quotes, as the plan's `String` durations
/// were (a plan's fingerprint hashes the ops' Debug text).
impl std::fmt::Debug for Duration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.text, f)
    }
}

impl From<&str> for Duration {
    fn from(text: &str) -> Duration {
        Duration::read(text)
    }
}

impl From<String> for Duration {
    fn from(text: String) -> Duration {
        Duration::read(&text)
    }
}

/// In the plan format a duration is its text.
impl serde::Serialize for Duration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> serde::Deserialize<'de> for Duration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        Ok(Duration::read(&text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_duration_is_read_once_and_written_as_its_text() {
        let d = Duration::read("1 minute 30 seconds");
        assert_eq!(d.ms(), Ok(90_000));
        assert_eq!(d.positive_ms(), Ok(90_000));
        assert_eq!(d.to_string(), "1 minute 30 seconds");
        assert_eq!(Duration::read("0 seconds").ms(), Ok(0));
        assert_eq!(
            Duration::read("0 seconds").positive_ms(),
            Err(DurationError::NotPositive)
        );
        assert_eq!(
            Duration::read("-1 minute").ms(),
            Err(DurationError::Negative)
        );
        let bad = Duration::read("ten minutes");
        assert!(bad.ms().is_err());
        assert_eq!(bad.text(), "ten minutes");
        assert!(Duration::default().is_empty());
    }

    #[test]
    fn parses_spark_style_durations() {
        assert_eq!(parse_duration_ms("10 minutes"), Ok(600_000));
        assert_eq!(parse_duration_ms("1 minute"), Ok(60_000));
        assert_eq!(parse_duration_ms("5 seconds"), Ok(5_000));
        assert_eq!(parse_duration_ms("2 hours"), Ok(7_200_000));
        assert_eq!(parse_duration_ms("1 day"), Ok(86_400_000));
        assert_eq!(parse_duration_ms("500 milliseconds"), Ok(500));
        assert_eq!(parse_duration_ms("1 minute 30 seconds"), Ok(90_000));
        assert_eq!(parse_duration_ms("interval 10 seconds"), Ok(10_000));
        assert_eq!(parse_duration_ms("10s"), Ok(10_000));
        assert_eq!(parse_duration_ms("0 seconds"), Ok(0));
    }

    #[test]
    fn rejects_malformed_durations() {
        assert_eq!(parse_duration_ms(""), Err(DurationError::Empty));
        assert_eq!(
            parse_duration_ms("ten minutes"),
            Err(DurationError::NotANumber("ten".into()))
        );
        assert_eq!(
            parse_duration_ms("10 fortnights"),
            Err(DurationError::UnknownUnit("fortnights".into()))
        );
        assert_eq!(
            parse_duration_ms("10"),
            Err(DurationError::MissingUnit("10".into()))
        );
        assert_eq!(
            parse_positive_duration_ms("0 minutes"),
            Err(DurationError::NotPositive)
        );
        assert_eq!(
            parse_duration_ms("-10 minutes"),
            Err(DurationError::Negative)
        );
        assert_eq!(
            parse_positive_duration_ms("-10 minutes"),
            Err(DurationError::NotPositive)
        );
    }
}
