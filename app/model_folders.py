"""The model manager's "Models folders…" dialog: the folders it looks in for GGUF files (each
searched with its subfolders), added and removed here and kept in the settings."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QPushButton,
    QVBoxLayout,
)


class FoldersDialog(QDialog):
    def __init__(self, folders: tuple[str, ...] | list[str], parent=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Models folders")
        self.resize(560, 320)
        col = QVBoxLayout(self)
        intro = QLabel(
            "GGUF files in these folders and their subfolders are listed under On this "
            "computer. They are used where they are; nothing is copied or moved."
        )
        intro.setWordWrap(True)
        intro.setObjectName("Muted")
        col.addWidget(intro)
        self.list = QListWidget()
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.list.addItems(list(folders))
        col.addWidget(self.list, 1)
        row = QHBoxLayout()
        self.add_button = QPushButton("Add folder…")
        self.add_button.clicked.connect(lambda: self.add_folder())
        self.remove_button = QPushButton("Remove")
        self.remove_button.clicked.connect(self.remove_selected)
        row.addWidget(self.add_button)
        row.addWidget(self.remove_button)
        row.addStretch(1)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        row.addWidget(buttons)
        col.addLayout(row)

    def add_folder(self, path: str | None = None) -> None:
        """Add `path`, or the folder the person picks; one already listed is not added twice."""
        if path is None:
            path = QFileDialog.getExistingDirectory(self, "Add a models folder")
        if path and path not in self.folders():
            self.list.addItem(path)

    def remove_selected(self) -> None:
        for item in self.list.selectedItems():
            self.list.takeItem(self.list.row(item))

    def folders(self) -> tuple[str, ...]:
        return tuple(self.list.item(i).text() for i in range(self.list.count()))
