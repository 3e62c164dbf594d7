//! [`store_conformance_tests!`](crate::store_conformance_tests): one test
//! per case for a harness factory.

/// Generate one `#[tokio::test]` per conformance case for a harness factory
/// `async fn() -> Option<H>`.
#[macro_export]
macro_rules! store_conformance_tests {
    ($make:path) => {
        $crate::store_conformance_tests!(@cases $make;
            claim_of_a_new_key_acquires,
            claim_while_in_flight_reports_owner,
            completed_outcome_is_returned_exactly,
            key_reuse_with_other_arguments_is_reported,
            stale_owner_cannot_complete,
            completed_outcome_is_never_overwritten,
            writes_to_an_absent_key_are_rejected,
            steps_survive_a_takeover,
            checkpoint_extends_the_lease,
            renewal_extends_the_lease_and_is_fenced,
            released_key_is_claimed_with_a_new_fence,
            expired_record_is_swept_and_key_reclaimed,
            sweep_spares_in_flight_and_live_records,
            waiter_is_woken_by_completion,
            waiter_is_woken_by_release,
            concurrent_claims_have_one_owner,
            very_long_leases_and_ttls_mean_forever,
            values_round_trip_exactly,
            close_flushes_and_refuses_further_writes,
            claim_records_call_details_and_worker,
            claim_records_the_first_reason,
            replace_swaps_only_the_record_it_expects,
            awaiting_approval_is_never_taken_over,
            approved_call_is_claimed_once_with_its_approval,
            replace_overrules_only_an_expired_lease,
            completed_record_is_replaced_and_deleted,
            unanswered_approval_request_expires,
            scan_returns_every_record_once,
            scan_open_returns_open_records_newest_first_once,
            scan_open_follows_records_as_they_settle,
            an_approval_is_claimed_only_with_the_arguments_it_was_given_for,
            decisions_outlive_the_ttls_around_them,
            an_approval_wakes_a_waiter_for_it,
            a_denial_wakes_a_waiter_for_it,
            a_waiter_for_a_decision_nobody_makes_returns_the_request,
            audit_events_read_back_exactly_in_pages,
            audit_is_filtered_by_key_and_time,
            replace_appends_its_event_only_when_it_swaps,
            audit_events_outlive_their_records,
            audit_retention_sweeps_only_older_events,
            concurrent_audit_appends_lose_none,
            a_claim_that_need_not_be_durable_decides_as_any_claim,
            relaxed_concurrent_claims_have_one_owner,
            a_completion_on_the_callers_thread_is_a_completion,
        );
    };
    (@cases $make:path; $($case:ident),* $(,)?) => {$(
        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            match $make().await {
                ::core::option::Option::Some(h) => $crate::$case(h).await,
                ::core::option::Option::None => $crate::skip(::core::stringify!($case)),
            }
        }
    )*};
}
