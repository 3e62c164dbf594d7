//! The VFS itself: SQLite's C interface, delegating to the default VFS.
//!
//! Modelled on SQLite's `vfstrace.c` and its crash tests: a file of this
//! VFS is a [`ShimFile`] (whose first field is the `sqlite3_file` SQLite
//! sees, its methods [`METHODS`]) followed, in the same allocation of
//! `szOsFile` bytes, by the default VFS's own file, to which every method
//! is passed on. Writes, truncations and syncs hold the machine's lock
//! while the default VFS does them, so that a cut happens entirely before
//! or entirely after each of them.
//!
//! Every function here is called by SQLite only, with the pointers its
//! VFS contract promises: `vfs` is the `sqlite3_vfs` [`register`] built
//! (its `pAppData` the leaked [`Machine`]), `file` a block of `szOsFile`
//! bytes aligned for any C object, which [`x_open`] initialised (SQLite
//! calls the other file methods only when `x_open` succeeded and set
//! `pMethods`). The `SAFETY` comments below rely on that contract.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::mem::size_of;
use std::path::PathBuf;
use std::ptr;

use rusqlite::ffi::{self, sqlite3_file, sqlite3_int64, sqlite3_io_methods, sqlite3_vfs};

use super::{FileKind, Machine};

/// SQLite's default VFS (`unix` on Unix), to which everything is passed
/// on.
pub(super) struct DefaultVfs(*mut sqlite3_vfs);

// SAFETY: a registered VFS is never freed or changed while registered, and
// SQLite requires its methods to be callable from any thread (this crate's
// SQLite is built thread-safe), which is all this pointer is used for.
unsafe impl Send for DefaultVfs {}
// SAFETY: as for Send: shared use only calls thread-safe VFS methods.
unsafe impl Sync for DefaultVfs {}

impl DefaultVfs {
    pub(super) fn find() -> Option<DefaultVfs> {
        // SAFETY: sqlite3_vfs_find (which initialises SQLite if needed)
        // with a null name returns the default VFS or null.
        let vfs = unsafe { ffi::sqlite3_vfs_find(ptr::null()) };
        (!vfs.is_null()).then_some(DefaultVfs(vfs))
    }
}

/// Whether a VFS is registered under `name`.
pub(super) fn is_registered(name: &CStr) -> bool {
    // SAFETY: `name` is NUL-terminated; the call only searches SQLite's
    // list of VFSes.
    !unsafe { ffi::sqlite3_vfs_find(name.as_ptr()) }.is_null()
}

/// Register the VFS of `machine` under its name (not as the default).
pub(super) fn register(machine: &'static Machine) -> Result<(), c_int> {
    let default = machine.default.0;
    // SAFETY: the default VFS is a valid, registered sqlite3_vfs, never
    // freed (see DefaultVfs).
    let (version, os_file, max_path) = unsafe {
        let d = &*default;
        (d.iVersion, d.szOsFile, d.mxPathname)
    };
    let vfs = Box::leak(Box::new(sqlite3_vfs {
        // Version 3 only adds the system-call overrides of SQLite's own
        // tests, which this VFS does not offer.
        iVersion: version.min(2),
        szOsFile: c_int::try_from(REAL_OFFSET).expect("a small struct") + os_file,
        mxPathname: max_path,
        pNext: ptr::null_mut(),
        // Both live for ever: the machine is leaked.
        zName: machine.name.as_ptr(),
        pAppData: ptr::from_ref(machine).cast_mut().cast(),
        xOpen: Some(x_open),
        xDelete: Some(x_delete),
        xAccess: Some(x_access),
        xFullPathname: Some(x_full_pathname),
        xDlOpen: Some(x_dl_open),
        xDlError: Some(x_dl_error),
        xDlSym: Some(x_dl_sym),
        xDlClose: Some(x_dl_close),
        xRandomness: Some(x_randomness),
        xSleep: Some(x_sleep),
        xCurrentTime: Some(x_current_time),
        xGetLastError: Some(x_get_last_error),
        xCurrentTimeInt64: Some(x_current_time_int64),
        xSetSystemCall: None,
        xGetSystemCall: None,
        xNextSystemCall: None,
    }));
    // SAFETY: `vfs` is a complete sqlite3_vfs that is never freed (leaked),
    // whose functions are those below.
    match unsafe { ffi::sqlite3_vfs_register(vfs, 0) } {
        ffi::SQLITE_OK => Ok(()),
        rc => Err(rc),
    }
}

/// A file opened through the VFS. `#[repr(C)]` with the `sqlite3_file`
/// first: SQLite's pointer to it is a pointer to this.
#[repr(C)]
struct ShimFile {
    /// What SQLite sees: `pMethods` is [`METHODS`] once open.
    base: sqlite3_file,
    /// What the VFS knows of the file: owned (a leaked `Box`), freed by
    /// [`x_close`].
    info: *mut FileInfo,
    // The default VFS's file follows, at REAL_OFFSET.
}

/// Where the default VFS's file starts in a [`ShimFile`]'s allocation:
/// after it, aligned for any C object (SQLite's allocations are aligned to
/// 8 bytes).
const REAL_OFFSET: usize = size_of::<ShimFile>().next_multiple_of(8);

struct FileInfo {
    machine: &'static Machine,
    /// With its path: a file whose syncs are counted and whose synced
    /// content is kept.
    tracked: Option<(FileKind, PathBuf)>,
}

/// The methods of every file of this VFS. Version 2: shared memory (WAL
/// needs it), without the memory-mapped reads of version 3.
static METHODS: sqlite3_io_methods = sqlite3_io_methods {
    iVersion: 2,
    xClose: Some(x_close),
    xRead: Some(x_read),
    xWrite: Some(x_write),
    xTruncate: Some(x_truncate),
    xSync: Some(x_sync),
    xFileSize: Some(x_file_size),
    xLock: Some(x_lock),
    xUnlock: Some(x_unlock),
    xCheckReservedLock: Some(x_check_reserved_lock),
    xFileControl: Some(x_file_control),
    xSectorSize: Some(x_sector_size),
    xDeviceCharacteristics: Some(x_device_characteristics),
    xShmMap: Some(x_shm_map),
    xShmLock: Some(x_shm_lock),
    xShmBarrier: Some(x_shm_barrier),
    xShmUnmap: Some(x_shm_unmap),
    xFetch: None,
    xUnfetch: None,
};

/// The machine of `vfs`.
///
/// # Safety
///
/// `vfs` is a VFS built by [`register`].
unsafe fn machine<'a>(vfs: *mut sqlite3_vfs) -> &'a Machine {
    // SAFETY: register set pAppData to a leaked &'static Machine.
    unsafe { &*(*vfs).pAppData.cast::<Machine>() }
}

/// The default VFS's file inside `file`.
///
/// # Safety
///
/// `file` is a block of this VFS's `szOsFile` bytes.
unsafe fn real(file: *mut sqlite3_file) -> *mut sqlite3_file {
    // SAFETY: the block is REAL_OFFSET + the default VFS's szOsFile bytes.
    unsafe { file.cast::<u8>().add(REAL_OFFSET).cast() }
}

/// What the VFS knows of `file`.
///
/// # Safety
///
/// `file` was opened by [`x_open`] and not closed.
unsafe fn info<'a>(file: *mut sqlite3_file) -> &'a FileInfo {
    // SAFETY: x_open set `info` to a leaked Box before returning
    // SQLITE_OK, and only x_close frees it.
    unsafe { &*(*file.cast::<ShimFile>()).info }
}

/// The methods of the default VFS's file `real`.
///
/// # Safety
///
/// `real` was opened by the default VFS and not closed.
unsafe fn methods<'a>(real: *mut sqlite3_file) -> &'a sqlite3_io_methods {
    // SAFETY: an open file's pMethods points to its VFS's static methods.
    unsafe { &*(*real).pMethods }
}

/// Call the default VFS's file method `$method` on the file under
/// `$file` (an open file of this VFS) with the other arguments; a method
/// the default VFS lacks fails with `$missing`.
macro_rules! pass_on {
    ($file:expr, $method:ident, $missing:expr $(, $arg:expr)*) => {{
        let real = real($file);
        match methods(real).$method {
            Some(f) => f(real $(, $arg)*),
            None => $missing,
        }
    }};
}

/// The content of the open file `real`, read whole.
///
/// # Safety
///
/// `real` was opened by the default VFS and not closed.
unsafe fn read_whole(real: *mut sqlite3_file) -> Result<Vec<u8>, c_int> {
    // SAFETY (of every call here): `real` is open (the caller's promise),
    // and the pointers passed are to live locals or into `content`, with
    // the lengths given.
    unsafe {
        let m = methods(real);
        let (Some(file_size), Some(read)) = (m.xFileSize, m.xRead) else {
            return Err(ffi::SQLITE_IOERR_READ);
        };
        let mut size: sqlite3_int64 = 0;
        match file_size(real, &mut size) {
            ffi::SQLITE_OK => {}
            rc => return Err(rc),
        }
        let mut content = vec![0u8; usize::try_from(size).map_err(|_| ffi::SQLITE_IOERR_READ)?];
        const CHUNK: usize = 1 << 20;
        for (i, chunk) in content.chunks_mut(CHUNK).enumerate() {
            let offset = (i * CHUNK) as sqlite3_int64;
            let len = chunk.len() as c_int;
            match read(real, chunk.as_mut_ptr().cast(), len, offset) {
                ffi::SQLITE_OK => {}
                rc => return Err(rc),
            }
        }
        Ok(content)
    }
}

/// The path of a file name SQLite passes (a full path name).
///
/// # Safety
///
/// `name` is null or NUL-terminated.
unsafe fn path_of(name: *const c_char) -> Option<PathBuf> {
    if name.is_null() {
        return None;
    }
    // SAFETY: non-null, NUL-terminated (the caller's promise).
    let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
    #[cfg(unix)]
    let path = PathBuf::from(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(bytes));
    #[cfg(not(unix))]
    let path = PathBuf::from(String::from_utf8_lossy(bytes).into_owned());
    Some(path)
}

impl FileKind {
    /// The kind of a file SQLite opens with `flags`.
    fn of(flags: c_int) -> Option<FileKind> {
        if flags & ffi::SQLITE_OPEN_MAIN_DB != 0 {
            Some(FileKind::Database)
        } else if flags & ffi::SQLITE_OPEN_WAL != 0 {
            Some(FileKind::Wal)
        } else if flags & ffi::SQLITE_OPEN_MAIN_JOURNAL != 0 {
            Some(FileKind::Journal)
        } else {
            None
        }
    }
}

// The VFS's methods.

unsafe extern "C" fn x_open(
    vfs: *mut sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // SAFETY: SQLite's xOpen contract (module docs): `vfs` is ours, `file`
    // a block of szOsFile bytes, `name` null or a NUL-terminated full path
    // name that the default VFS may read URI parameters after, so the
    // very pointer is passed on.
    unsafe {
        let shim = file.cast::<ShimFile>();
        // SQLite calls xClose after a failed xOpen only when pMethods is
        // set: set it once everything else succeeded.
        (*shim).base.pMethods = ptr::null();
        (*shim).info = ptr::null_mut();
        let machine = machine(vfs);
        let tracked = FileKind::of(flags).zip(path_of(name));
        let mut state = machine.lock();
        if !state.on {
            return ffi::SQLITE_CANTOPEN;
        }
        // A file first seen already on disk is taken as it is: its
        // content is what a cut now would leave.
        let first_seen = tracked
            .as_ref()
            .filter(|(_, path)| !state.tracks(path))
            .map(|(_, path)| path.exists());
        let default = machine.default.0;
        let Some(open) = (*default).xOpen else {
            return ffi::SQLITE_CANTOPEN;
        };
        let real = real(file);
        let rc = open(default, name, real, flags, out_flags);
        if rc != ffi::SQLITE_OK {
            close_real(real);
            return rc;
        }
        if let (Some(existed), Some((kind, path))) = (first_seen, &tracked) {
            let content = match existed {
                true => match read_whole(real) {
                    Ok(content) => Some(content),
                    Err(rc) => {
                        close_real(real);
                        return rc;
                    }
                },
                false => None,
            };
            state.first_opened(path.clone(), *kind, content);
        }
        (*shim).info = Box::into_raw(Box::new(FileInfo { machine, tracked }));
        (*shim).base.pMethods = &METHODS;
        ffi::SQLITE_OK
    }
}

/// Close the default VFS's file `real` if its open left it open.
///
/// # Safety
///
/// `real` is a default VFS's file block after an `xOpen`.
unsafe fn close_real(real: *mut sqlite3_file) {
    // SAFETY: a non-null pMethods is the default VFS's open file's.
    unsafe {
        if !(*real).pMethods.is_null() {
            if let Some(close) = methods(real).xClose {
                close(real);
            }
            (*real).pMethods = ptr::null();
        }
    }
}

unsafe extern "C" fn x_delete(
    vfs: *mut sqlite3_vfs,
    name: *const c_char,
    sync_dir: c_int,
) -> c_int {
    // SAFETY: `vfs` is ours, `name` NUL-terminated (xDelete's contract).
    unsafe {
        let machine = machine(vfs);
        let mut state = machine.lock();
        if !state.on {
            return ffi::SQLITE_IOERR_DELETE;
        }
        let default = machine.default.0;
        let Some(delete) = (*default).xDelete else {
            return ffi::SQLITE_IOERR_DELETE;
        };
        let rc = delete(default, name, sync_dir);
        if rc == ffi::SQLITE_OK {
            if let Some(path) = path_of(name) {
                state.deleted(&path);
            }
        }
        rc
    }
}

/// Call the default VFS's method `$method` with the other arguments; a
/// method it lacks fails with `$missing`.
macro_rules! to_default {
    ($vfs:expr, $method:ident, $missing:expr $(, $arg:expr)*) => {{
        let default = machine($vfs).default.0;
        match (*default).$method {
            Some(f) => f(default $(, $arg)*),
            None => $missing,
        }
    }};
}

// SAFETY (of the functions below, up to the file methods): `vfs` is ours,
// and the other arguments are SQLite's, passed on unchanged to the
// default VFS, whose contract is the same.

unsafe extern "C" fn x_access(
    vfs: *mut sqlite3_vfs,
    name: *const c_char,
    flags: c_int,
    out: *mut c_int,
) -> c_int {
    unsafe { to_default!(vfs, xAccess, ffi::SQLITE_IOERR_ACCESS, name, flags, out) }
}

unsafe extern "C" fn x_full_pathname(
    vfs: *mut sqlite3_vfs,
    name: *const c_char,
    n_out: c_int,
    out: *mut c_char,
) -> c_int {
    unsafe { to_default!(vfs, xFullPathname, ffi::SQLITE_CANTOPEN, name, n_out, out) }
}

unsafe extern "C" fn x_dl_open(vfs: *mut sqlite3_vfs, name: *const c_char) -> *mut c_void {
    unsafe { to_default!(vfs, xDlOpen, ptr::null_mut(), name) }
}

unsafe extern "C" fn x_dl_error(vfs: *mut sqlite3_vfs, n: c_int, out: *mut c_char) {
    unsafe { to_default!(vfs, xDlError, (), n, out) }
}

type DlSym = Option<unsafe extern "C" fn(*mut sqlite3_vfs, *mut c_void, *const c_char)>;

unsafe extern "C" fn x_dl_sym(
    vfs: *mut sqlite3_vfs,
    handle: *mut c_void,
    symbol: *const c_char,
) -> DlSym {
    unsafe { to_default!(vfs, xDlSym, None, handle, symbol) }
}

unsafe extern "C" fn x_dl_close(vfs: *mut sqlite3_vfs, handle: *mut c_void) {
    unsafe { to_default!(vfs, xDlClose, (), handle) }
}

unsafe extern "C" fn x_randomness(vfs: *mut sqlite3_vfs, n: c_int, out: *mut c_char) -> c_int {
    unsafe { to_default!(vfs, xRandomness, 0, n, out) }
}

unsafe extern "C" fn x_sleep(vfs: *mut sqlite3_vfs, micros: c_int) -> c_int {
    unsafe { to_default!(vfs, xSleep, 0, micros) }
}

unsafe extern "C" fn x_current_time(vfs: *mut sqlite3_vfs, out: *mut f64) -> c_int {
    unsafe { to_default!(vfs, xCurrentTime, ffi::SQLITE_ERROR, out) }
}

unsafe extern "C" fn x_get_last_error(vfs: *mut sqlite3_vfs, n: c_int, out: *mut c_char) -> c_int {
    unsafe { to_default!(vfs, xGetLastError, 0, n, out) }
}

unsafe extern "C" fn x_current_time_int64(vfs: *mut sqlite3_vfs, out: *mut sqlite3_int64) -> c_int {
    unsafe { to_default!(vfs, xCurrentTimeInt64, ffi::SQLITE_ERROR, out) }
}

// The file methods. SAFETY (of each): SQLite calls them only on a file
// x_open opened and x_close has not closed, so `info` and the default
// VFS's file under it are valid; the other arguments are SQLite's, passed
// on unchanged to the default VFS's file, whose contract is the same.

unsafe extern "C" fn x_close(file: *mut sqlite3_file) -> c_int {
    unsafe {
        let rc = pass_on!(file, xClose, ffi::SQLITE_OK);
        let shim = file.cast::<ShimFile>();
        // The Box x_open leaked; SQLite calls no method after xClose.
        drop(Box::from_raw((*shim).info));
        (*shim).info = ptr::null_mut();
        rc
    }
}

unsafe extern "C" fn x_read(
    file: *mut sqlite3_file,
    buf: *mut c_void,
    amount: c_int,
    offset: sqlite3_int64,
) -> c_int {
    unsafe { pass_on!(file, xRead, ffi::SQLITE_IOERR_READ, buf, amount, offset) }
}

unsafe extern "C" fn x_write(
    file: *mut sqlite3_file,
    buf: *const c_void,
    amount: c_int,
    offset: sqlite3_int64,
) -> c_int {
    unsafe {
        // Held while writing: a cut waits for the write.
        let state = info(file).machine.lock();
        if !state.on {
            return ffi::SQLITE_IOERR_WRITE;
        }
        pass_on!(file, xWrite, ffi::SQLITE_IOERR_WRITE, buf, amount, offset)
    }
}

unsafe extern "C" fn x_truncate(file: *mut sqlite3_file, size: sqlite3_int64) -> c_int {
    unsafe {
        let state = info(file).machine.lock();
        if !state.on {
            return ffi::SQLITE_IOERR_TRUNCATE;
        }
        pass_on!(file, xTruncate, ffi::SQLITE_IOERR_TRUNCATE, size)
    }
}

unsafe extern "C" fn x_sync(file: *mut sqlite3_file, flags: c_int) -> c_int {
    unsafe {
        let info = info(file);
        let mut state = info.machine.lock();
        if !state.on {
            return ffi::SQLITE_IOERR_FSYNC;
        }
        if let Some((kind, _)) = &info.tracked {
            state.count_sync(*kind);
        }
        let rc = pass_on!(file, xSync, ffi::SQLITE_IOERR_FSYNC, flags);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        // What a cut from now on leaves of the file: all of it.
        if let Some((kind, path)) = &info.tracked {
            match read_whole(real(file)) {
                Ok(content) => state.synced(path, *kind, content),
                Err(rc) => return rc,
            }
        }
        ffi::SQLITE_OK
    }
}

unsafe extern "C" fn x_file_size(file: *mut sqlite3_file, size: *mut sqlite3_int64) -> c_int {
    unsafe { pass_on!(file, xFileSize, ffi::SQLITE_IOERR_FSTAT, size) }
}

unsafe extern "C" fn x_lock(file: *mut sqlite3_file, level: c_int) -> c_int {
    unsafe { pass_on!(file, xLock, ffi::SQLITE_IOERR_LOCK, level) }
}

unsafe extern "C" fn x_unlock(file: *mut sqlite3_file, level: c_int) -> c_int {
    unsafe { pass_on!(file, xUnlock, ffi::SQLITE_IOERR_UNLOCK, level) }
}

unsafe extern "C" fn x_check_reserved_lock(file: *mut sqlite3_file, out: *mut c_int) -> c_int {
    unsafe {
        pass_on!(
            file,
            xCheckReservedLock,
            ffi::SQLITE_IOERR_CHECKRESERVEDLOCK,
            out
        )
    }
}

unsafe extern "C" fn x_file_control(file: *mut sqlite3_file, op: c_int, arg: *mut c_void) -> c_int {
    unsafe {
        // A size hint may grow the file (with a chunk size set): a write.
        if op == ffi::SQLITE_FCNTL_SIZE_HINT && !info(file).machine.lock().on {
            return ffi::SQLITE_IOERR_TRUNCATE;
        }
        pass_on!(file, xFileControl, ffi::SQLITE_NOTFOUND, op, arg)
    }
}

unsafe extern "C" fn x_sector_size(file: *mut sqlite3_file) -> c_int {
    unsafe { pass_on!(file, xSectorSize, 4096) }
}

unsafe extern "C" fn x_device_characteristics(file: *mut sqlite3_file) -> c_int {
    unsafe { pass_on!(file, xDeviceCharacteristics, 0) }
}

unsafe extern "C" fn x_shm_map(
    file: *mut sqlite3_file,
    region: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    unsafe {
        // The shared memory went with the power (and its file with the
        // cut): mapping it again would create a new one.
        if !info(file).machine.lock().on {
            return ffi::SQLITE_IOERR_SHMMAP;
        }
        pass_on!(
            file,
            xShmMap,
            ffi::SQLITE_IOERR_SHMMAP,
            region,
            size,
            extend,
            out
        )
    }
}

unsafe extern "C" fn x_shm_lock(
    file: *mut sqlite3_file,
    offset: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    unsafe { pass_on!(file, xShmLock, ffi::SQLITE_IOERR_SHMLOCK, offset, n, flags) }
}

unsafe extern "C" fn x_shm_barrier(file: *mut sqlite3_file) {
    unsafe { pass_on!(file, xShmBarrier, ()) }
}

unsafe extern "C" fn x_shm_unmap(file: *mut sqlite3_file, delete: c_int) -> c_int {
    unsafe {
        // Once the power is off nothing is deleted: the `-shm` file there
        // may already be the next machine's.
        let delete = match info(file).machine.lock().on {
            true => delete,
            false => 0,
        };
        pass_on!(file, xShmUnmap, ffi::SQLITE_OK, delete)
    }
}
