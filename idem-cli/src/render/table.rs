//! Aligned tables, as `kubectl get` prints them: upper-case headers, columns
//! two spaces apart, widths measured on the text without its colours.

use anstyle::Style;

use super::style::{paint, HEADER};

/// One cell: its text and how it is coloured.
#[derive(Debug, Clone, Default)]
pub struct Cell {
    text: String,
    style: Style,
}

impl Cell {
    /// Uncoloured text.
    pub fn plain(text: impl Into<String>) -> Self {
        Cell {
            text: text.into(),
            style: Style::new(),
        }
    }

    /// Coloured text.
    pub fn styled(text: impl Into<String>, style: Style) -> Self {
        Cell {
            text: text.into(),
            style,
        }
    }
}

/// A table being filled.
#[derive(Debug, Clone)]
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<Cell>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new(headers: &[&'static str]) -> Self {
        Table {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Add a row (as many cells as headers).
    pub fn row(&mut self, cells: Vec<Cell>) {
        debug_assert_eq!(cells.len(), self.headers.len());
        self.rows.push(cells);
    }

    /// The table as lines of text, each ending in a newline.
    pub fn render(&self) -> String {
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
}
