//! Clicks per user session: a session window closes after 5 minutes without
//! a click from that user. The valid neighbour of
//! `session_window_in_update_mode`, `session_window_only_key` and
//! `malformed_session_gap`: append mode (each session is emitted once, when
//! the watermark passes its end) and a user column next to the session.

weir::stream_query! {
    /// Clicks per user session (5 minutes of inactivity closes a session).
    query UserSessions {
        source: memory,
        schema: Click { user: String, ts: Timestamp },
        watermark: ts delay "10 minutes",
        group_by: [session_window(ts, "5 minutes"), user],
        aggregate: { clicks: count() },
        output_mode: append,
        sink: memory(name = "user_sessions"),
    }
}

/// Starts the query over rows handed in at run time (a memory stream).
pub fn start(
    session: &weir::Session,
    source: weir::source::BoxSource,
) -> weir::Result<weir::StreamingQuery> {
    UserSessions::writer_from(session, source)?.start()
}

#[test]
fn user_sessions_group_by_a_session_window_and_the_user() {
    let plan = UserSessions::plan();
    assert!(weir::plan::check(&plan).is_empty());
    assert!(UserSessions::EXPLAIN.contains(
        "SessionWindowStateStoreSave Aggregate keys=[session_window(ts, \"5 minutes\") AS session_window, user]"
    ));
    // The session window is a `Window`; count is i64.
    let row = UserSessionsRow {
        session_window: weir::Window {
            start: weir::Timestamp(0),
            end: weir::Timestamp(300_000_000),
        },
        user: "ann".to_string(),
        clicks: 1,
    };
    let _: (&weir::Window, &String, &i64) = (&row.session_window, &row.user, &row.clicks);
    assert_eq!(
        <UserSessionsRow as weir::Row>::fields(),
        vec![
            weir::plan::Field::new("session_window", weir::plan::DataType::Window),
            weir::plan::Field::new("user", weir::plan::DataType::String),
            weir::plan::Field::new("clicks", weir::plan::DataType::Int64),
        ]
    );
    let batch = <UserSessionsRow as weir::Row>::to_batch(std::slice::from_ref(&row)).unwrap();
    assert_eq!(
        <UserSessionsRow as weir::Row>::from_batch(&batch).unwrap(),
        vec![row]
    );
}
