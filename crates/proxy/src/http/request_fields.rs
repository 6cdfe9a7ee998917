//! A request's fields, whichever front end parsed them: the own loop's in-place head or
//! hyper's header map, as one concrete type (see `pipeline::view` for why not a trait's
//! associated type).

use http::HeaderMap;

use crate::http::header_policy::Fields;
use crate::http::request_head::{PlainFields, PlainFieldsIter};

/// A request's fields, whichever front end parsed them.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RequestFields<'a> {
    /// The own loop's head, parsed in place.
    Plain(PlainFields<'a>),
    /// hyper's header map.
    Map(&'a HeaderMap),
}

impl<'a> Fields<'a> for RequestFields<'a> {
    type Iter = RequestFieldsIter<'a>;

    fn iter(self) -> RequestFieldsIter<'a> {
        match self {
            RequestFields::Plain(fields) => RequestFieldsIter::Plain(fields.iter()),
            RequestFields::Map(map) => RequestFieldsIter::Map(Fields::iter(map)),
        }
    }
}

/// A walk over [`RequestFields`].
pub(crate) enum RequestFieldsIter<'a> {
    /// Over a plain head.
    Plain(PlainFieldsIter<'a>),
    /// Over a header map.
    Map(<&'a HeaderMap as Fields<'a>>::Iter),
}

impl<'a> Iterator for RequestFieldsIter<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            RequestFieldsIter::Plain(walk) => walk.next(),
            RequestFieldsIter::Map(walk) => walk.next(),
        }
    }
}
