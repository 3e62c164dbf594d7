//! Aligned tables, as `kubectl get` prints them: upper-case headers, columns
//! two spaces apart, widths measured on the text without its colours.
//! A cell's text is shown escaped ([`visible`]): a control character in a
//! tool name or a worker cannot break the table or redraw the screen.

use anstyle::Style;

use super::style::{paint, HEADER};
use idem_runtime::text::visible;

/// One cell: its text, escaped, and how it is coloured.
#[derive(Debug, Clone, Default)]
pub(crate) struct Cell {
    text: String,
    style: Style,
}

impl Cell {
    /// Uncoloured text.
    pub(crate) fn plain(text: impl Into<String>) -> Self {
        Cell::styled(text, Style::new())
    }

    /// Coloured text.
    pub(crate) fn styled(text: impl Into<String>, style: Style) -> Self {
        let text = text.into();
        Cell {
            text: match visible(&text) {
                std::borrow::Cow::Borrowed(_) => text,
                std::borrow::Cow::Owned(escaped) => escaped,
            },
            style,
        }
    }
}

/// A table being filled.
#[derive(Debug, Clone)]
pub(crate) struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<Cell>>,
}

impl Table {
    /// A table with these column headers.
    pub(crate) fn new(headers: &[&'static str]) -> Self {
        Table {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Add a row (as many cells as headers).
    pub(crate) fn row(&mut self, cells: Vec<Cell>) {
        debug_assert_eq!(cells.len(), self.headers.len());
        self.rows.push(cells);
    }

    /// The table as lines of text, each ending in a newline.
    pub(crate) fn render(&self) -> String {
        let width = |s: &str| s.chars().count();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| width(h)).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(width(&cell.text));
            }
        }
        let mut out = String::new();
        let header: Vec<Cell> = self
            .headers
            .iter()
            .map(|h| Cell::styled(*h, HEADER))
            .collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            let last = row.len() - 1;
            for (i, cell) in row.iter().enumerate() {
                out.push_str(&paint(cell.style, &cell.text));
                if i < last {
                    let pad = widths[i] - width(&cell.text) + 2;
                    out.extend(std::iter::repeat_n(' ', pad));
                }
            }
            // No trailing spaces when the last cells are empty.
            out.truncate(out.trim_end_matches(' ').len());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_on_the_widest_cell_and_ignore_colours() {
        let mut table = Table::new(&["KEY", "STATE", "TOOL"]);
        table.row(vec![
            Cell::plain("5518e357ff50"),
            Cell::styled("unknown", Style::new().bold()),
            Cell::plain("charge_card"),
        ]);
        table.row(vec![
            Cell::plain("b0f7a75e656a"),
            Cell::plain("awaiting_approval"),
            Cell::plain("delete_account"),
        ]);
        let text = table.render();
        let plain: String = text.replace("\u{1b}[1m", "").replace("\u{1b}[0m", "");
        assert_eq!(
            plain,
            "KEY           STATE              TOOL\n\
             5518e357ff50  unknown            charge_card\n\
             b0f7a75e656a  awaiting_approval  delete_account\n"
        );
    }

    #[test]
    fn a_cell_cannot_redraw_the_screen_or_break_its_row() {
        let mut table = Table::new(&["TOOL", "WORKER"]);
        table.row(vec![
            Cell::plain("charge\r\x1b[2Kcard"),
            Cell::plain("w\n1"),
        ]);
        let plain = table
            .render()
            .replace("\u{1b}[1m", "")
            .replace("\u{1b}[0m", "");
        assert_eq!(
            plain,
            "TOOL                   WORKER\n\
             charge\\r\\u{1b}[2Kcard  w\\n1\n"
        );
    }
}
