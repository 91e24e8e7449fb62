; inherits: ecma
(class_declaration name: (identifier) @name) @definition.class
(class_heritage (identifier) @reference.class)
(jsx_opening_element name: (identifier) @reference.class)
(jsx_self_closing_element name: (identifier) @reference.class)
