; inherits: typescript
(jsx_opening_element name: (identifier) @reference.class)
(jsx_self_closing_element name: (identifier) @reference.class)
