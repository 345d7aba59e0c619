//! Column types as the macro sees them: a plan [`DataType`] plus whether the
//! column may be null (`Option<T>` in Rust), and their Rust and SQL spellings.

use proc_macro2::TokenStream;
use quote::quote;
use weir_plan::types::ElementType;
use weir_plan::DataType;

/// A column's type: the plan type and its nullability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColType {
    /// The plan type (`Option<T>` has the type of `T`).
    pub dtype: DataType,
    /// True for `Option<T>`.
    pub nullable: bool,
}

impl ColType {
    /// A non-null column of this type.
    pub fn new(dtype: DataType) -> ColType {
        ColType {
            dtype,
            nullable: false,
        }
    }

    /// A nullable column of this type.
    pub fn nullable(dtype: DataType) -> ColType {
        ColType {
            dtype,
            nullable: true,
        }
    }
}

/// A named, typed column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Col {
    /// The column name.
    pub name: String,
    /// Its type.
    pub ty: ColType,
}

impl Col {
    /// A column from a name and a type.
    pub fn new(name: impl Into<String>, ty: ColType) -> Col {
        Col {
            name: name.into(),
            ty,
        }
    }
}

/// The column with this name.
pub fn lookup<'a>(cols: &'a [Col], name: &str) -> Option<&'a Col> {
    cols.iter().find(|c| c.name == name)
}

/// The Rust types a schema field may have.
pub const SUPPORTED: &str =
    "String, i32, i64, f64, bool, Timestamp, Vec<u8>, Vec<...> of these (an array), or Option<...> of these";

/// The column type of a Rust type written in a schema or an `as` cast.
pub fn parse_rust_type(ty: &syn::Type) -> Result<ColType, String> {
    let inner = match ty {
        syn::Type::Group(g) => return parse_rust_type(&g.elem),
        syn::Type::Paren(p) => return parse_rust_type(&p.elem),
        syn::Type::Path(p) if p.qself.is_none() => p,
        _ => return Err(unsupported(ty)),
    };
    let seg = inner.path.segments.last().ok_or_else(|| unsupported(ty))?;
    let generic_arg = || match &seg.arguments {
        syn::PathArguments::AngleBracketed(a) if a.args.len() == 1 => match &a.args[0] {
            syn::GenericArgument::Type(t) => Some(t),
            _ => None,
        },
        _ => None,
    };
    let plain = matches!(seg.arguments, syn::PathArguments::None);
    let dtype = match seg.ident.to_string().as_str() {
        "Option" => {
            let t = generic_arg().ok_or_else(|| unsupported(ty))?;
            let c = parse_rust_type(t)?;
            if c.nullable {
                return Err(format!(
                    "`{}` nests Option; a column is either nullable or not",
                    quote!(#ty).to_string().replace(' ', "")
                ));
            }
            return Ok(ColType::nullable(c.dtype));
        }
        "Vec" => match generic_arg() {
            Some(syn::Type::Path(p)) if p.path.is_ident("u8") => DataType::Binary,
            // An array of non-null values of a scalar type.
            Some(t) => match parse_rust_type(t) {
                Ok(ColType {
                    dtype,
                    nullable: false,
                }) => match dtype.element() {
                    Some(e) => DataType::List(e),
                    None => return Err(unsupported(ty)),
                },
                _ => return Err(unsupported(ty)),
            },
            None => return Err(unsupported(ty)),
        },
        "String" if plain => DataType::String,
        "i32" if plain => DataType::Int32,
        "i64" if plain => DataType::Int64,
        "f64" if plain => DataType::Float64,
        "bool" if plain => DataType::Bool,
        "Timestamp" if plain => DataType::Timestamp,
        _ => return Err(unsupported(ty)),
    };
    Ok(ColType::new(dtype))
}

fn unsupported(ty: &syn::Type) -> String {
    format!(
        "unsupported column type `{}`; use {SUPPORTED}",
        quote!(#ty).to_string().replace(' ', "")
    )
}

/// The Rust type of a column, as generated code spells it.
pub fn rust_type_tokens(ty: ColType) -> TokenStream {
    let base = match ty.dtype {
        DataType::Timestamp => quote!(::weir::Timestamp),
        DataType::String => quote!(::std::string::String),
        DataType::Int32 => quote!(i32),
        DataType::Int64 => quote!(i64),
        DataType::Float64 => quote!(f64),
        DataType::Bool => quote!(bool),
        DataType::Binary => quote!(::std::vec::Vec<u8>),
        DataType::Window => quote!(::weir::Window),
        DataType::List(e) => {
            let item = rust_type_tokens(ColType::new(e.data_type()));
            quote!(::std::vec::Vec<#item>)
        }
    };
    if ty.nullable {
        quote!(::std::option::Option<#base>)
    } else {
        base
    }
}

/// The Rust type of a column as a user writes it (`Option<i64>`), for messages and docs.
pub fn rust_type_name(ty: ColType) -> String {
    let base = match ty.dtype {
        DataType::Timestamp => "Timestamp".to_string(),
        DataType::String => "String".to_string(),
        DataType::Int32 => "i32".to_string(),
        DataType::Int64 => "i64".to_string(),
        DataType::Float64 => "f64".to_string(),
        DataType::Bool => "bool".to_string(),
        DataType::Binary => "Vec<u8>".to_string(),
        DataType::Window => "Window".to_string(),
        DataType::List(e) => format!("Vec<{}>", rust_type_name(ColType::new(e.data_type()))),
    };
    if ty.nullable {
        format!("Option<{base}>")
    } else {
        base
    }
}

/// `::weir::plan::DataType::Int64`.
pub fn data_type_tokens(dtype: DataType) -> TokenStream {
    let v = match dtype {
        DataType::Timestamp => quote!(Timestamp),
        DataType::String => quote!(String),
        DataType::Int32 => quote!(Int32),
        DataType::Int64 => quote!(Int64),
        DataType::Float64 => quote!(Float64),
        DataType::Bool => quote!(Bool),
        DataType::Binary => quote!(Binary),
        DataType::Window => quote!(Window),
        DataType::List(e) => {
            let e = element_type_tokens(e);
            quote!(List(#e))
        }
    };
    quote!(::weir::plan::DataType::#v)
}

/// `::weir::plan::types::ElementType::Int64`.
fn element_type_tokens(e: ElementType) -> TokenStream {
    let v = match e {
        ElementType::Timestamp => quote!(Timestamp),
        ElementType::String => quote!(String),
        ElementType::Int32 => quote!(Int32),
        ElementType::Int64 => quote!(Int64),
        ElementType::Float64 => quote!(Float64),
        ElementType::Bool => quote!(Bool),
        ElementType::Binary => quote!(Binary),
    };
    quote!(::weir::plan::types::ElementType::#v)
}

/// The SQL type name a `CAST(... AS T)` uses, when the type can be cast to.
pub fn sql_type_name(dtype: DataType) -> Option<&'static str> {
    Some(match dtype {
        DataType::Timestamp => "TIMESTAMP",
        DataType::String => "VARCHAR",
        DataType::Int32 => "INT",
        DataType::Int64 => "BIGINT",
        DataType::Float64 => "DOUBLE",
        DataType::Bool => "BOOLEAN",
        DataType::Binary => "BYTEA",
        DataType::Window | DataType::List(_) => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    #[test]
    fn reads_the_supported_types() {
        let t = |ty: syn::Type| parse_rust_type(&ty);
        assert_eq!(t(parse_quote!(String)), Ok(ColType::new(DataType::String)));
        assert_eq!(t(parse_quote!(i64)), Ok(ColType::new(DataType::Int64)));
        assert_eq!(
            t(parse_quote!(weir::Timestamp)),
            Ok(ColType::new(DataType::Timestamp))
        );
        assert_eq!(t(parse_quote!(Vec<u8>)), Ok(ColType::new(DataType::Binary)));
        assert_eq!(
            t(parse_quote!(Option<f64>)),
            Ok(ColType::nullable(DataType::Float64))
        );
        assert_eq!(
            t(parse_quote!(u32)).unwrap_err(),
            format!("unsupported column type `u32`; use {SUPPORTED}")
        );
        assert!(t(parse_quote!(Option<Option<i64>>))
            .unwrap_err()
            .contains("nests Option"));
        assert_eq!(
            t(parse_quote!(Vec<i64>)),
            Ok(ColType::new(DataType::List(ElementType::Int64)))
        );
        assert_eq!(
            t(parse_quote!(Option<Vec<Vec<u8>>>)),
            Ok(ColType::nullable(DataType::List(ElementType::Binary)))
        );
        for bad in [
            parse_quote!(Vec<Option<i64>>),
            parse_quote!(Vec<Vec<i64>>),
            parse_quote!(Vec<Window>),
            parse_quote!(Vec<u32>),
        ] {
            assert!(t(bad).is_err());
        }
    }

    #[test]
    fn spells_types() {
        assert_eq!(
            rust_type_name(ColType::nullable(DataType::Int64)),
            "Option<i64>"
        );
        assert_eq!(
            rust_type_tokens(ColType::nullable(DataType::String)).to_string(),
            quote!(::std::option::Option<::std::string::String>).to_string()
        );
        assert_eq!(sql_type_name(DataType::Int64), Some("BIGINT"));
        let list = ColType::new(DataType::List(ElementType::Timestamp));
        assert_eq!(rust_type_name(list), "Vec<Timestamp>");
        assert_eq!(
            rust_type_tokens(list).to_string(),
            quote!(::std::vec::Vec<::weir::Timestamp>).to_string()
        );
        assert_eq!(
            data_type_tokens(list.dtype).to_string(),
            quote!(::weir::plan::DataType::List(
                ::weir::plan::types::ElementType::Timestamp
            ))
            .to_string()
        );
        assert_eq!(sql_type_name(list.dtype), None);
    }
}
