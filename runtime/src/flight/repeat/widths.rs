//! What each row of a batch takes, in bytes: the measure of what an operator that repeats rows
//! would copy.

use arrow::array::{Array, AsArray, OffsetSizeTrait};
use arrow::datatypes::DataType;

/// Each row's bytes across `columns` (all of the same length).
pub(super) fn row_bytes<'a>(
    columns: impl IntoIterator<Item = &'a dyn Array>,
    rows: usize,
) -> Vec<i64> {
    let mut each = vec![0i64; rows];
    for column in columns {
        add(column, &mut each);
    }
    each
}

/// Adds what each row of `array` takes to `rows` (`rows.len() == array.len()`).
fn add(array: &dyn Array, rows: &mut [i64]) {
    let mut each = |f: &mut dyn FnMut(usize) -> i64| {
        for (i, row) in rows.iter_mut().enumerate() {
            *row = row.saturating_add(f(i));
        }
    };
    match array.data_type() {
        DataType::Null => {}
        DataType::Boolean => each(&mut |_| 1),
        DataType::Utf8 => offsets(array.as_string::<i32>().value_offsets(), rows),
        DataType::LargeUtf8 => offsets(array.as_string::<i64>().value_offsets(), rows),
        DataType::Binary => offsets(array.as_binary::<i32>().value_offsets(), rows),
        DataType::LargeBinary => offsets(array.as_binary::<i64>().value_offsets(), rows),
        DataType::Utf8View => {
            let views = array.as_string_view();
            each(&mut |i| 16 + views.value(i).len() as i64)
        }
        DataType::BinaryView => {
            let views = array.as_binary_view();
            each(&mut |i| 16 + views.value(i).len() as i64)
        }
        DataType::List(_) => {
            let list = array.as_list::<i32>();
            nested(list.value_offsets(), list.values().as_ref(), rows)
        }
        DataType::LargeList(_) => {
            let list = array.as_list::<i64>();
            nested(list.value_offsets(), list.values().as_ref(), rows)
        }
        DataType::Map(..) => {
            let map = array.as_map();
            let entries: &dyn Array = map.entries();
            nested(map.value_offsets(), entries, rows)
        }
        DataType::FixedSizeList(_, n) => {
            let list = array.as_fixed_size_list();
            let values = list.values();
            let n = usize::try_from(*n).unwrap_or(0);
            let mut children = vec![0i64; values.len()];
            add(values.as_ref(), &mut children);
            let start = list.offset() * n;
            each(&mut |i| {
                let from = (start + i * n).min(children.len());
                let to = (from + n).min(children.len());
                children[from..to].iter().sum()
            })
        }
        DataType::Struct(_) => {
            for child in array.as_struct().columns() {
                add(child.as_ref(), rows);
            }
        }
        DataType::Dictionary(..) => {
            let dictionary = array.as_any_dictionary();
            let values = dictionary.values();
            let mut of_value = vec![0i64; values.len()];
            add(values.as_ref(), &mut of_value);
            let key = dictionary.keys().data_type().primitive_width().unwrap_or(8) as i64;
            if values.is_empty() {
                each(&mut |_| key)
            } else {
                let keys = dictionary.normalized_keys();
                each(&mut |i| key.saturating_add(of_value[keys[i]]))
            }
        }
        t => match t.primitive_width() {
            Some(width) => each(&mut |_| width as i64),
            // Anything else (unions, run-end encoded arrays): its rows share its memory evenly.
            None => {
                let share = (array.get_array_memory_size() / array.len().max(1)) as i64;
                each(&mut |_| share)
            }
        },
    }
}

/// What all of `array`'s rows take together — the sum of what [`add`] gives each — when that
/// needs no pass that builds a value per row (fixed widths, offsets, views' lengths); `None`
/// for the types only measured row by row (lists, maps, dictionaries, unions).
pub(super) fn total(array: &dyn Array) -> Option<i64> {
    let rows = array.len() as i64;
    let fixed = |width: i64| Some(width.saturating_mul(rows));
    match array.data_type() {
        DataType::Null => Some(0),
        DataType::Boolean => fixed(1),
        DataType::Utf8 => Some(offsets_total(array.as_string::<i32>().value_offsets())),
        DataType::LargeUtf8 => Some(offsets_total(array.as_string::<i64>().value_offsets())),
        DataType::Binary => Some(offsets_total(array.as_binary::<i32>().value_offsets())),
        DataType::LargeBinary => Some(offsets_total(array.as_binary::<i64>().value_offsets())),
        DataType::Utf8View => Some(views_total(array.as_string_view().views())),
        DataType::BinaryView => Some(views_total(array.as_binary_view().views())),
        DataType::FixedSizeList(_, n) => {
            // A slice's values are sliced with it (its offset is always 0).
            let values = array.as_fixed_size_list().values();
            let held = usize::try_from(*n)
                .unwrap_or(0)
                .saturating_mul(array.len())
                .min(values.len());
            total(values.slice(0, held).as_ref())
        }
        DataType::Struct(_) => array
            .as_struct()
            .columns()
            .iter()
            .try_fold(0i64, |sum, child| {
                Some(sum.saturating_add(total(child.as_ref())?))
            }),
        t => t.primitive_width().and_then(|width| fixed(width as i64)),
    }
}

/// Variable-size values' bytes from their offsets, with theirs.
fn offsets_total<O: OffsetSizeTrait>(offsets: &[O]) -> i64 {
    let rows = offsets.len().saturating_sub(1) as i64;
    let values = match (offsets.first(), offsets.last()) {
        (Some(first), Some(last)) => (*last - *first).as_usize() as i64,
        _ => 0,
    };
    values.saturating_add(rows.saturating_mul(std::mem::size_of::<O>() as i64))
}

/// Views' bytes: 16 for each view, with the length its low 32 bits hold.
fn views_total(views: &[u128]) -> i64 {
    let lengths: i64 = views.iter().map(|view| i64::from(*view as u32)).sum();
    lengths.saturating_add(16i64.saturating_mul(views.len() as i64))
}

/// A variable-size value's bytes from its offsets, with its offset.
fn offsets<O: OffsetSizeTrait>(offsets: &[O], rows: &mut [i64]) {
    let width = std::mem::size_of::<O>() as i64;
    for (row, pair) in rows.iter_mut().zip(offsets.windows(2)) {
        let length = (pair[1] - pair[0]).as_usize() as i64;
        *row = row.saturating_add(length + width);
    }
}

/// A list's rows: the bytes of the elements each holds, with its offset.
fn nested<O: OffsetSizeTrait>(offsets: &[O], values: &dyn Array, rows: &mut [i64]) {
    let mut elements = vec![0i64; values.len()];
    add(values, &mut elements);
    let width = std::mem::size_of::<O>() as i64;
    for (row, pair) in rows.iter_mut().zip(offsets.windows(2)) {
        let (from, to) = (pair[0].as_usize(), pair[1].as_usize());
        let held: i64 = elements
            .get(from..to.min(elements.len()))
            .map_or(0, |e| e.iter().sum());
        *row = row.saturating_add(held + width);
    }
}

/// How many rows each row of list column `array` unnests to, `depth` levels down (an empty or
/// NULL list: none).
pub(super) fn unnested_rows(array: &dyn Array, depth: usize, rows: &mut [i64]) {
    fn count<O: OffsetSizeTrait>(offsets: &[O], values: &dyn Array, depth: usize) -> Vec<i64> {
        let inner = (depth > 1).then(|| {
            let mut inner = vec![0i64; values.len()];
            unnested_rows(values, depth - 1, &mut inner);
            inner
        });
        offsets
            .windows(2)
            .map(|pair| {
                let (from, to) = (pair[0].as_usize(), pair[1].as_usize());
                match &inner {
                    Some(inner) => inner.get(from..to).map_or(0, |e| e.iter().sum()),
                    None => (to - from) as i64,
                }
            })
            .collect()
    }
    let counts = match array.data_type() {
        DataType::List(_) => {
            let list = array.as_list::<i32>();
            count(list.value_offsets(), list.values().as_ref(), depth)
        }
        DataType::LargeList(_) => {
            let list = array.as_list::<i64>();
            count(list.value_offsets(), list.values().as_ref(), depth)
        }
        DataType::FixedSizeList(_, n) => {
            let n = usize::try_from(*n).unwrap_or(0);
            if depth > 1 {
                let list = array.as_fixed_size_list();
                let values = list.values();
                let mut inner = vec![0i64; values.len()];
                unnested_rows(values.as_ref(), depth - 1, &mut inner);
                let start = list.offset() * n;
                (0..array.len())
                    .map(|i| {
                        let from = (start + i * n).min(inner.len());
                        let to = (from + n).min(inner.len());
                        inner[from..to].iter().sum()
                    })
                    .collect()
            } else {
                vec![n as i64; array.len()]
            }
        }
        _ => vec![1; array.len()],
    };
    for (row, n) in rows.iter_mut().zip(counts) {
        *row = (*row).max(n);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, FixedSizeListArray, Int64Array, ListArray, StringArray};
    use arrow::datatypes::Int64Type;

    use super::*;

    #[test]
    fn rows_are_measured_one_by_one() {
        let text: ArrayRef = Arc::new(StringArray::from(vec![Some("a"), None, Some("abcdef")]));
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, 3]));
        let lists: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
            Some(vec![Some(1), Some(2)]),
            None,
            Some(vec![]),
        ]));
        let each = row_bytes([text.as_ref(), ints.as_ref(), lists.as_ref()], 3);
        // text + offset, 8, elements + offset
        assert_eq!(
            each,
            vec![(1 + 4) + 8 + (16 + 4), 4 + 8 + 4, (6 + 4) + 8 + 4]
        );
        // A slice measures its own rows.
        let sliced = text.slice(2, 1);
        assert_eq!(row_bytes([sliced.as_ref()], 1), vec![10]);
    }

    /// The sum without a pass per row is the sum of the rows, for every type it answers, whole
    /// and sliced; the types it does not answer are measured row by row.
    #[test]
    fn a_total_is_the_sum_of_its_rows() {
        use arrow::array::{
            BinaryArray, BooleanArray, Float32Array, LargeStringArray, NullArray, StringViewArray,
            StructArray,
        };
        use arrow::datatypes::{Field, Float32Type};
        let long = "a value longer than twelve bytes";
        let views: ArrayRef = Arc::new(StringViewArray::from(vec![
            Some("short"),
            None,
            Some(long),
            Some(""),
        ]));
        let text: ArrayRef = Arc::new(StringArray::from(vec![
            Some("a"),
            None,
            Some("abc"),
            Some(""),
        ]));
        let struct_of: ArrayRef = Arc::new(StructArray::from(vec![
            (
                Arc::new(Field::new("t", text.data_type().clone(), true)),
                text.clone(),
            ),
            (
                Arc::new(Field::new("i", arrow::datatypes::DataType::Int64, true)),
                Arc::new(Int64Array::from(vec![1, 2, 3, 4])) as ArrayRef,
            ),
        ]));
        let vectors: ArrayRef = Arc::new(FixedSizeListArray::from_iter_primitive::<
            Float32Type,
            _,
            _,
        >(
            (0..4).map(|i| Some(vec![Some(i as f32); 3])), 3
        ));
        let answered: Vec<ArrayRef> = vec![
            Arc::new(NullArray::new(4)),
            Arc::new(BooleanArray::from(vec![true, false, true, true])),
            Arc::new(Int64Array::from(vec![Some(1), None, Some(3), Some(4)])),
            Arc::new(Float32Array::from(vec![1.0, 2.0, 3.0, 4.0])),
            text,
            Arc::new(LargeStringArray::from(vec!["xy", "", "z", "0123456789"])),
            Arc::new(BinaryArray::from(vec![&b"\x00"[..], b"", b"ab", b"c"])),
            views,
            vectors,
            struct_of,
        ];
        for array in &answered {
            for (offset, len) in [(0, 4), (1, 2), (3, 1), (2, 0)] {
                let slice = array.slice(offset, len);
                let rows: i64 = row_bytes([slice.as_ref()], len).iter().sum();
                assert_eq!(
                    total(slice.as_ref()),
                    Some(rows),
                    "{} sliced at {offset}+{len}",
                    array.data_type()
                );
            }
        }
        let lists: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
            Some(vec![Some(1)]),
        ]));
        assert_eq!(total(lists.as_ref()), None, "lists are measured row by row");
    }

    #[test]
    fn unnested_rows_count_elements_per_level() {
        let lists: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
            Some(vec![Some(1), Some(2), Some(3)]),
            None,
            Some(vec![Some(4)]),
        ]));
        let mut rows = vec![0; 3];
        unnested_rows(lists.as_ref(), 1, &mut rows);
        assert_eq!(rows, vec![3, 0, 1]);
        // Fixed-size lists of lists: the elements two levels down.
        let inner = ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
            Some(vec![Some(1); 5]),
            Some(vec![]),
            Some(vec![Some(2); 7]),
            Some(vec![Some(3)]),
        ]);
        let field = Arc::new(arrow::datatypes::Field::new_list_field(
            inner.data_type().clone(),
            true,
        ));
        let fixed = FixedSizeListArray::new(field, 2, Arc::new(inner), None);
        let mut rows = vec![0; 2];
        unnested_rows(&fixed, 2, &mut rows);
        assert_eq!(rows, vec![5, 8]);
        let mut rows = vec![0; 2];
        unnested_rows(&fixed, 1, &mut rows);
        assert_eq!(rows, vec![2, 2]);
    }
}
