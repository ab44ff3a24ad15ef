//! What stays with a client or a process between compiles: attachments (per-client state such as
//! the compile cache), the persistent executable cache on disk (`disk`) and the process's memory mappings.

pub(super) mod attachments;
pub(super) mod disk;
pub(super) mod mappings;
