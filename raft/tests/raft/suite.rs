//! openraft's own storage test suite (`openraft::testing::log::Suite`, 45 cases in
//! 0.10.0-alpha.37) against the adapter on real files, a fresh temp dir per case.

use openraft::testing::log::{StoreBuilder, Suite};
use openraft::StorageError;
use wal_raft::{log_options, LogStore, StateMachineStore, TypeConfig};

struct FreshStore;

fn to_storage_error(e: std::io::Error) -> StorageError<TypeConfig> {
    StorageError::read(<TypeConfig as openraft::type_config::TypeConfigExt>::err_from_error(&e))
}

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, tempfile::TempDir> for FreshStore {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachineStore), StorageError<TypeConfig>> {
        let dir = tempfile::tempdir().map_err(to_storage_error)?;
        let mut opts = log_options(64 << 10);
        opts.prepare_in_background = false;
        let log = LogStore::open(dir.path().join("log"), opts).map_err(to_storage_error)?;
        let sm = StateMachineStore::open(Some(&dir.path().join("sm"))).map_err(to_storage_error)?;
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        // The suite sleeps 1 s after each of its eight purges; 120 s bounds a hang.
        tokio::time::timeout(std::time::Duration::from_secs(120), Suite::test_all(FreshStore))
            .await
            .expect("the suite did not finish in 120 s")
            .expect("suite");
    });
}
