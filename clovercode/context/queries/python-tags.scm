; Definitions
(class_definition name: (identifier) @name) @definition.class
(function_definition name: (identifier) @name) @definition.function
(module (assignment left: (identifier) @name) @definition.constant)

; References
(call function: (identifier) @reference.call)
(call function: (attribute attribute: (identifier) @reference.call))
(decorator (identifier) @reference.call)
(decorator (attribute attribute: (identifier) @reference.call))
(class_definition superclasses: (argument_list (identifier) @reference.class))
(class_definition superclasses: (argument_list (attribute attribute: (identifier) @reference.class)))
(type (identifier) @reference.type)
(generic_type (identifier) @reference.type)
(type (attribute attribute: (identifier) @reference.type))
(import_from_statement name: (dotted_name (identifier) @reference.import))
(import_from_statement name: (aliased_import name: (dotted_name (identifier) @reference.import)))
(except_clause (identifier) @reference.class)
(raise_statement (identifier) @reference.class)
