//! [`forward_storage!`](crate::storage::forward_storage): the methods of a storage seam trait
//! ([`Reader`](super::Reader), [`Writer`](super::Writer), [`Completions`](super::Completions))
//! that a wrapper passes through to what it wraps, unchanged.

/// Implements the listed seam methods, inside an `impl Reader`, `impl Writer` or
/// `impl Completions` block, by calling the same method on `self.<field>`. For a backend that
/// wraps another and changes only part of its behaviour: the synchronous driver passes the
/// reads and directory operations to its blocking backend; the io_uring backend runs writes and
/// syncs itself and passes the rest to the files; test and benchmark wrappers count, record or
/// replace one or two calls. A method not listed keeps the trait's default or is written out
/// beside.
///
/// ```ignore
/// impl Reader for Counting {
///     wal::forward_storage!(inner: list, open, close, len, read_at, lock_shared);
///     fn map(&self, file: FileId) -> io::Result<Mapping> {
///         self.maps.fetch_add(1, Ordering::Relaxed);
///         self.inner.map(file)
///     }
/// }
/// ```
///
/// Exported (at the crate root and as `wal::storage::forward_storage`) only with the
/// workspace's `internal` feature, like the storage module whose traits it implements: a
/// controller's build sees neither.
#[cfg_attr(feature = "internal", macro_export)]
macro_rules! forward_storage {
    ($field:ident: $($method:ident),+ $(,)?) => {
        $( $crate::storage::forward_storage!(@one $field $method); )+
    };
    (@one $f:ident list) => {
        fn list(&self) -> ::std::io::Result<::std::vec::Vec<::std::string::String>> {
            self.$f.list()
        }
    };
    (@one $f:ident open) => {
        fn open(&self, name: &str) -> ::std::io::Result<$crate::storage::FileId> {
            self.$f.open(name)
        }
    };
    (@one $f:ident create) => {
        fn create(&self, name: &str) -> ::std::io::Result<$crate::storage::FileId> {
            self.$f.create(name)
        }
    };
    (@one $f:ident close) => {
        fn close(&self, file: $crate::storage::FileId) {
            self.$f.close(file)
        }
    };
    (@one $f:ident remove) => {
        fn remove(&self, name: &str) -> ::std::io::Result<()> {
            self.$f.remove(name)
        }
    };
    (@one $f:ident rename) => {
        fn rename(&self, from: &str, to: &str) -> ::std::io::Result<()> {
            self.$f.rename(from, to)
        }
    };
    (@one $f:ident len) => {
        fn len(&self, file: $crate::storage::FileId) -> ::std::io::Result<u64> {
            self.$f.len(file)
        }
    };
    (@one $f:ident read_at) => {
        fn read_at(&self, file: $crate::storage::FileId, offset: u64, buf: &mut [u8]) -> ::std::io::Result<usize> {
            self.$f.read_at(file, offset, buf)
        }
    };
    (@one $f:ident map) => {
        fn map(&self, file: $crate::storage::FileId) -> ::std::io::Result<$crate::storage::Mapping> {
            self.$f.map(file)
        }
    };
    (@one $f:ident written_end) => {
        fn written_end(&self, file: $crate::storage::FileId) -> ::std::io::Result<u64> {
            self.$f.written_end(file)
        }
    };
    (@one $f:ident not_regular) => {
        fn not_regular(&self, name: &str) -> ::std::io::Result<::std::option::Option<&'static str>> {
            self.$f.not_regular(name)
        }
    };
    (@one $f:ident scan_window) => {
        fn scan_window(&self) -> ::std::option::Option<usize> {
            self.$f.scan_window()
        }
    };
    (@one $f:ident submit) => {
        fn submit(&self, sub: $crate::storage::Submission) -> ::std::io::Result<()> {
            self.$f.submit(sub)
        }
    };
    (@one $f:ident reap) => {
        fn reap(
            &self,
            out: &mut ::std::vec::Vec<$crate::storage::Completion>,
            wait: bool,
        ) -> ::std::io::Result<()> {
            self.$f.reap(out, wait)
        }
    };
    (@one $f:ident lock_shared) => {
        fn lock_shared(&self) -> ::std::io::Result<$crate::storage::LockGuard> {
            self.$f.lock_shared()
        }
    };
    (@one $f:ident lock_exclusive) => {
        fn lock_exclusive(&self) -> ::std::io::Result<$crate::storage::LockGuard> {
            self.$f.lock_exclusive()
        }
    };
    (@one $f:ident write_at) => {
        fn write_at(&self, file: $crate::storage::FileId, offset: u64, data: &[u8]) -> ::std::io::Result<usize> {
            self.$f.write_at(file, offset, data)
        }
    };
    (@one $f:ident sync_data) => {
        fn sync_data(&self, file: $crate::storage::FileId) -> ::std::io::Result<()> {
            self.$f.sync_data(file)
        }
    };
    (@one $f:ident sync_dir) => {
        fn sync_dir(&self) -> ::std::io::Result<()> {
            self.$f.sync_dir()
        }
    };
    (@one $f:ident zero_fill) => {
        fn zero_fill(&self, file: $crate::storage::FileId, len: u64) -> ::std::io::Result<()> {
            self.$f.zero_fill(file, len)
        }
    };
    (@one $f:ident drop_cached) => {
        fn drop_cached(&self, file: $crate::storage::FileId, offset: u64, len: u64) -> ::std::io::Result<()> {
            self.$f.drop_cached(file, offset, len)
        }
    };
    (@one $f:ident reserve) => {
        fn reserve(&self, file: $crate::storage::FileId, len: u64) -> ::std::io::Result<bool> {
            self.$f.reserve(file, len)
        }
    };
    (@one $f:ident concurrent_wait) => {
        fn concurrent_wait(&self) -> bool {
            self.$f.concurrent_wait()
        }
    };
    (@one $f:ident wait) => {
        fn wait(
            &self,
            bell: &::std::sync::Arc<$crate::storage::Bell>,
            timeout: ::std::option::Option<::std::time::Duration>,
        ) -> ::std::io::Result<()> {
            self.$f.wait(bell, timeout)
        }
    };
}

#[cfg(not(feature = "internal"))]
pub(crate) use forward_storage;
