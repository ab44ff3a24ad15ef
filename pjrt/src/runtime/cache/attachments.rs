//! State that higher layers attach to a client: one value per type, created
//! on first use and shared by every [`Device`](super::super::Device) over the same
//! client (the kernel layer keeps its compile cache here). The runtime
//! itself never looks inside.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// A type-keyed map of shared values.
#[derive(Default)]
pub(crate) struct Attachments {
    by_type: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl Attachments {
    /// The value of type `T`, created with `T::default()` on first use.
    pub(crate) fn get_or_default<T: Any + Default + Send + Sync>(&self) -> Arc<T> {
        let mut map = self.by_type.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = map
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(T::default()));
        match Arc::clone(entry).downcast::<T>() {
            Ok(value) => value,
            // The map is keyed by the value's own TypeId, so this arm only
            // runs if that invariant is broken; replace the entry rather than fail.
            Err(_) => {
                let value = Arc::new(T::default());
                *entry = value.clone();
                value
            }
        }
    }
}
