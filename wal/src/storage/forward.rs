//! [`forward_storage!`](crate::forward_storage): the methods of a [`Storage`](super::Storage)
//! that wraps another and passes them through unchanged.

/// Implements the listed `Storage` methods, inside an `impl Storage`
/// block, by calling the same method on `self.<field>`. For a backend that wraps another and
/// changes only part of its behaviour: the io_uring backend runs writes and syncs itself and
/// passes the rest to the file backend; test and benchmark wrappers count, record or replace
/// one or two calls. A method not listed keeps the trait's default or is written out beside.
///
/// ```ignore
/// impl Storage for Counting {
///     wal::forward_storage!(inner: list, open, close, remove, rename, len, read_at, submit, reap, lock, prepare_file);
///     fn map(&self, file: FileId) -> io::Result<Mapping> {
///         self.maps.fetch_add(1, Ordering::Relaxed);
///         self.inner.map(file)
///     }
/// }
/// ```
#[macro_export]
macro_rules! forward_storage {
    ($field:ident: $($method:ident),+ $(,)?) => {
        $( $crate::forward_storage!(@one $field $method); )+
    };
    (@one $f:ident list) => {
        fn list(&self) -> ::std::io::Result<::std::vec::Vec<::std::string::String>> {
            self.$f.list()
        }
    };
    (@one $f:ident open) => {
        fn open(&self, name: &str, create_new: bool) -> ::std::io::Result<$crate::storage::FileId> {
            self.$f.open(name, create_new)
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
    (@one $f:ident lock) => {
        fn lock(&self, exclusive: bool) -> ::std::io::Result<$crate::storage::LockGuard> {
            self.$f.lock(exclusive)
        }
    };
    (@one $f:ident prepare_file) => {
        fn prepare_file(&self, name: &str, len: u64) -> ::std::io::Result<()> {
            self.$f.prepare_file(name, len)
        }
    };
    (@one $f:ident prepare_file_reserved) => {
        fn prepare_file_reserved(&self, name: &str, len: u64) -> ::std::io::Result<()> {
            self.$f.prepare_file_reserved(name, len)
        }
    };
    (@one $f:ident recycle_file) => {
        fn recycle_file(
            &self,
            from: &str,
            name: &str,
            len: u64,
            writes: &[(u64, Vec<u8>)],
        ) -> ::std::io::Result<()> {
            self.$f.recycle_file(from, name, len, writes)
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
