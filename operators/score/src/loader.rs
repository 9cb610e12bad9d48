//! Loading a model version off the inference thread (hot reload, `crate::reload`).
//!
//! Loading, validating and warming a new version can take seconds for a large model. Done on
//! the inference thread, it would stop scoring for that long: batches would wait, the
//! in-flight bound would fill and the sources would pause. Instead the watcher starts a
//! [`Loading`] on a thread of its own and keeps serving; between batches it asks whether the
//! load is done and swaps the new session in then.

use std::sync::mpsc::{self, Receiver, TryRecvError};

use crate::error::{Result, ScoreError};
use crate::session::ModelSession;

/// A version being loaded on its own thread.
pub(crate) struct Loading {
    result: Receiver<Result<ModelSession>>,
}

impl Loading {
    /// Starts `load` on a new thread named `name`; if no thread can be started, the load
    /// fails (the watcher counts it and retries once the files change).
    pub(crate) fn start(
        name: String,
        load: impl FnOnce() -> Result<ModelSession> + Send + 'static,
    ) -> Loading {
        let (tx, rx) = mpsc::channel();
        let sender = tx.clone();
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            // The watcher may have moved on and dropped the receiver: nothing to tell.
            let _ = sender.send(load());
        });
        if let Err(e) = spawned {
            let _ = tx.send(Err(ScoreError::Thread(format!(
                "cannot start a model-loading thread: {e}"
            ))));
        }
        Loading { result: rx }
    }

    /// The load's outcome once it is done (a panic while loading is a failure too); `None`
    /// while it runs. Does not wait.
    pub(crate) fn outcome(&self) -> Option<Result<ModelSession>> {
        match self.result.try_recv() {
            Ok(result) => Some(result),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => Some(Err(ScoreError::Thread(
                "the thread loading the model version panicked".into(),
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use super::Loading;
    use crate::error::ScoreError;

    /// Waits for `loading`'s outcome (fails after 10 s).
    fn wait(loading: &Loading) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(outcome) = loading.outcome() {
                return match outcome {
                    Ok(session) => format!("loaded {session:?}"),
                    Err(e) => e.to_string(),
                };
            }
            assert!(Instant::now() < deadline, "the load never finished");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_running_load_does_not_hold_up_the_caller() {
        let (release, released) = mpsc::channel::<()>();
        let loading = Loading::start("weir-load-test".into(), move || {
            // A slow load: it finishes only when the test lets it.
            let _ = released.recv();
            Err(ScoreError::Batch("v2 does not fit".into()))
        });
        for _ in 0..5 {
            assert!(loading.outcome().is_none(), "reported done while loading");
        }
        let _ = release.send(());
        assert!(wait(&loading).contains("v2 does not fit"));
    }

    #[test]
    fn a_load_that_panics_is_a_failure() {
        let loading = Loading::start("weir-load-test".into(), || panic!("corrupt graph"));
        assert_eq!(
            wait(&loading),
            "inference thread: the thread loading the model version panicked"
        );
    }
}
